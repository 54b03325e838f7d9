"""The Stuck board: every receipt, event and message held past its lease, each with its
release action."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from idemdash.dashboard import queries
from idemdash.dashboard.access import viewer_required

@require_GET
@viewer_required
def stuck(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    rows = list(queries.stuck_receipts(now)[:500])
    events = list(queries.stuck_events(now).select_related("endpoint")[:500])
    outbox = list(queries.stuck_messages(now)[:500])
    return render(request, "dashboard/stuck.html", {
        "receipts": rows, "now": now, "total": queries.stuck_receipts(now).count(),
        "events": events, "events_total": queries.stuck_events(now).count(),
        "messages_stuck": outbox, "messages_total": queries.stuck_messages(now).count(),
    })
