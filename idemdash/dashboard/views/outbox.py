"""Outbox pages: the filtered list and one message's page (its summary, attempts and payload,
credentials masked). Its actions, send now, send again and release, are
receipts/outbox/operator_actions.py's, served by idemdash/dashboard/views/actions.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.http import require_GET

from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.forms import OutboxFilter
from idemdash.dashboard.queries import latest
from idemdash.dashboard.views.pages import LOG_LIMIT, detail_page, filtered_list, lease_state, pretty_json
from receipts.outbox.models import OutboxAttempt, OutboxMessage

Status = OutboxMessage.Status


@require_GET
@viewer_required
def outbox(request: HttpRequest) -> HttpResponse:
    return filtered_list(request, OutboxFilter(request.GET), "dashboard/outbox.html", "dashboard/partials/outbox_table.html")


def summary(message: OutboxMessage) -> tuple[str, dict[str, Any]]:
    state = lease_state(message, Status.IN_FLIGHT, live=(Status.PENDING, Status.RETRY, Status.IN_FLIGHT))
    return "dashboard/partials/outboxmessage_summary.html", {"message": message, **state}


@require_GET
@viewer_required
def message_detail(request: HttpRequest, pk: int) -> HttpResponse:
    message = get_object_or_404(OutboxMessage, pk=pk)
    log, attempt_total = latest(OutboxAttempt.objects.filter(message=message), "-created_at", "-id", limit=LOG_LIMIT)
    return detail_page(request, "dashboard/message_detail.html", summary, message, attempts=log,
                       attempt_total=attempt_total, payload_pretty=pretty_json(message.payload))
