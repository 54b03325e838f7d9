"""Webhook event pages: the filtered list, one event's page (its summary, attempts, deliveries
and payload), and the rejected deliveries. Its actions, reprocess and release, are
webhooks/operator_actions.py's, served by idemdash/dashboard/views/actions.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.forms import EventFilter, RejectedFilter
from idemdash.dashboard.queries import latest
from idemdash.dashboard.views.pages import LOG_LIMIT, detail_page, filtered_list, lease_state, pretty_json
from webhooks.models import WebhookEvent

Status = WebhookEvent.Status


@require_GET
@viewer_required
def events(request: HttpRequest) -> HttpResponse:
    return filtered_list(request, EventFilter(request.GET), "dashboard/events.html", "dashboard/partials/event_table.html")


@require_GET
@viewer_required
def rejected(request: HttpRequest) -> HttpResponse:
    # The excerpt is at most 256 printable characters of the body, never a header: a
    # signature or secret cannot reach this page.
    return filtered_list(request, RejectedFilter(request.GET), "dashboard/rejected.html",
                         "dashboard/partials/rejected_table.html")


def summary(event: WebhookEvent) -> tuple[str, dict[str, Any]]:
    return "dashboard/partials/event_summary.html", {
        "event": event,
        **lease_state(event, Status.PROCESSING, live=(Status.RECEIVED, Status.RETRY, Status.PROCESSING)),
        "reprocessable": event.status not in (Status.PROCESSING, Status.HELD),
    }


@require_GET
@viewer_required
def event_detail(request: HttpRequest, pk: int) -> HttpResponse:
    event = get_object_or_404(WebhookEvent.objects.select_related("endpoint"), pk=pk)
    deliveries, delivery_total = latest(event.deliveries.all(), "-received_at", "-id", limit=LOG_LIMIT)
    tries, attempt_total = latest(event.attempt_log.all(), "-id", limit=LOG_LIMIT)
    return detail_page(request, "dashboard/event_detail.html", summary, event, attempts=tries,
                       attempt_total=attempt_total, at="started_at", deliveries=deliveries, delivery_total=delivery_total,
                       payload_pretty=pretty_json(event.payload))
