"""Webhook event pages: the filtered list, one event's page (its summary, attempts, deliveries
and payload), and the rejected deliveries. Its actions, reprocess and release, are
webhooks/operator_actions.py's, served by idemdash/dashboard/views/actions.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from idemdash.dashboard import queries
from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.forms import EventFilter, RejectedFilter
from idemdash.dashboard.views.pages import filtered_list, latest, pretty_json
from webhooks.models import WebhookEndpoint, WebhookEvent

Status = WebhookEvent.Status

@require_GET
@viewer_required
def events(request: HttpRequest) -> HttpResponse:
    form = EventFilter(request.GET)
    return filtered_list(request, form, lambda: (form.events(), "received_at", True), "dashboard/events.html",
                         "dashboard/partials/event_table.html",
                         {"endpoints": WebhookEndpoint.objects.order_by("slug").values_list("slug", flat=True)})


ATTEMPT_LIMIT = 300
DELIVERY_LIMIT = 300


def summary(event: WebhookEvent) -> tuple[str, dict[str, Any]]:
    now = timezone.now()
    return "dashboard/partials/event_summary.html", {
        "event": event,
        "now": now,
        "stuck": event.status == Status.PROCESSING and event.lease_expires_at and event.lease_expires_at < now,
        "reprocessable": event.status not in (Status.PROCESSING, Status.HELD),
        # Not final: the page polls its summary and errors until the outcome lands.
        "live": event.status in (Status.RECEIVED, Status.RETRY, Status.PROCESSING),
    }


@require_GET
@viewer_required
def event_detail(request: HttpRequest, pk: int) -> HttpResponse:
    event = get_object_or_404(WebhookEvent.objects.select_related("endpoint"), pk=pk)
    deliveries, delivery_total = latest(event.deliveries.all(), "-received_at", "-id", limit=DELIVERY_LIMIT)
    tries, attempt_total = latest(event.attempt_log.all(), "-id", limit=ATTEMPT_LIMIT)
    _, context = summary(event)
    return render(request, "dashboard/event_detail.html", {
        **context,
        "attempts": tries,
        "attempt_total": attempt_total,
        "deliveries": deliveries,
        "delivery_total": delivery_total,
        "payload_pretty": pretty_json(event.payload),
        "audit": queries.audit_of(event),
    })



@require_GET
@viewer_required
def rejected(request: HttpRequest) -> HttpResponse:
    # The excerpt is at most 256 printable characters of the body, never a header: a
    # signature or secret cannot reach this page.
    form = RejectedFilter(request.GET)
    return filtered_list(request, form, lambda: (form.rejections(), "received_at", True), "dashboard/rejected.html",
                         "dashboard/partials/rejected_table.html")
