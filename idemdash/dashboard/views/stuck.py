"""The Stuck board: every receipt, event and message held past its lease, each with its
release action. Under htmx only the board, which the page polls."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from idemdash.dashboard import queries
from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.views.pages import partial_or_page

@require_GET
@viewer_required
def stuck(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    rows = list(queries.stuck_receipts(now)[:500])
    events = list(queries.stuck_events(now).select_related("endpoint")[:500])
    outbox = list(queries.stuck_messages(now)[:500])
    return partial_or_page(request, "dashboard/stuck.html", "dashboard/partials/stuck_board.html", {
        "receipts": rows, "now": now, "total": queries.stuck_receipts(now).count(),
        "events": events, "events_total": queries.stuck_events(now).count(),
        "messages_stuck": outbox, "messages_total": queries.stuck_messages(now).count(),
    })
