"""Outbox pages: the filtered list and one message's page (its summary, attempts and payload,
credentials masked). Its actions, send now, send again and release, are
receipts/outbox/operator_actions.py's, served by idemdash/dashboard/views/actions.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.views.decorators.http import require_GET

from idemdash.dashboard import queries
from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.forms import OutboxFilter
from idemdash.dashboard.views.pages import filtered_list, latest, pretty_json
from receipts.outbox.actions import masked_payload
from receipts.outbox.models import OutboxAttempt, OutboxMessage

Status = OutboxMessage.Status

@require_GET
@viewer_required
def outbox(request: HttpRequest) -> HttpResponse:
    form = OutboxFilter(request.GET)
    return filtered_list(request, form, lambda: (form.messages(), "created_at", True), "dashboard/outbox.html",
                         "dashboard/partials/outbox_table.html",
                         {"actions": OutboxMessage.objects.order_by("action").values_list("action", flat=True).distinct()})


ATTEMPT_LIMIT = 300


def summary(message: OutboxMessage) -> tuple[str, dict[str, Any]]:
    now = timezone.now()
    return "dashboard/partials/outboxmessage_summary.html", {
        "message": message,
        "now": now,
        "stuck": message.status == Status.IN_FLIGHT and message.lease_expires_at and message.lease_expires_at < now,
        # Not final: the page polls its summary and attempts until the outcome lands.
        "live": message.status in (Status.PENDING, Status.RETRY, Status.IN_FLIGHT),
    }


@require_GET
@viewer_required
def message_detail(request: HttpRequest, pk: int) -> HttpResponse:
    message = get_object_or_404(OutboxMessage, pk=pk)
    log, attempt_total = latest(OutboxAttempt.objects.filter(message=message), "-created_at", "-id", limit=ATTEMPT_LIMIT)
    _, context = summary(message)
    return render(request, "dashboard/message_detail.html", {
        **context,
        "attempts": log,
        "attempt_total": attempt_total,
        "payload_pretty": pretty_json(masked_payload(message.payload)),
        "audit": queries.audit_of(message),
    })
