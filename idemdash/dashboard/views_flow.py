"""Dashboard pages for webhook events, rejected deliveries and the outbox: thin function
views over the forms' querysets; every action goes through the domain functions in
webhooks.processing and receipts.outbox.store, which write the audit log."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from idemdash.dashboard import queries
from idemdash.dashboard.access import operator_required, viewer_required
from idemdash.dashboard.actions import ObjectAction, run_object_action
from idemdash.dashboard.forms import EventFilter, OutboxFilter, RejectedFilter
from idemdash.dashboard.pages import filtered_list, latest
from receipts.outbox import store as outbox_store
from receipts.outbox.actions import masked_payload
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from webhooks import processing
from webhooks.models import WebhookEndpoint, WebhookEvent

EventStatus = WebhookEvent.Status
MessageStatus = OutboxMessage.Status


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


# --- webhook events -----------------------------------------------------------------------------


@require_GET
@viewer_required
def events(request: HttpRequest) -> HttpResponse:
    form = EventFilter(request.GET)
    return filtered_list(request, form, lambda: (form.events(), "received_at", True), "dashboard/events.html",
                         "dashboard/partials/event_table.html",
                         {"endpoints": WebhookEndpoint.objects.order_by("slug").values_list("slug", flat=True)})


DELIVERY_LIMIT = 300


def _event_summary(event: WebhookEvent) -> tuple[str, dict[str, Any]]:
    now = timezone.now()
    return "dashboard/partials/event_summary.html", {
        "event": event,
        "now": now,
        "stuck": event.status == EventStatus.PROCESSING and event.lease_expires_at and event.lease_expires_at < now,
        "reprocessable": event.status not in (EventStatus.PROCESSING, EventStatus.HELD),
        # Not final: the page polls its summary and errors until the outcome lands.
        "live": event.status in (EventStatus.RECEIVED, EventStatus.RETRY, EventStatus.PROCESSING),
    }


@require_GET
@viewer_required
def event_detail(request: HttpRequest, pk: int) -> HttpResponse:
    event = get_object_or_404(WebhookEvent.objects.select_related("endpoint"), pk=pk)
    deliveries, delivery_total = latest(event.deliveries.all(), "-received_at", "-id", limit=DELIVERY_LIMIT)
    tries, attempt_total = latest(event.attempt_log.all(), "-id", limit=ATTEMPT_LIMIT)
    _, context = _event_summary(event)
    return render(request, "dashboard/event_detail.html", {
        **context,
        "attempts": tries,
        "attempt_total": attempt_total,
        "deliveries": deliveries,
        "delivery_total": delivery_total,
        "payload_pretty": _pretty(event.payload),
        "audit": queries.audit_of(event),
    })


EVENT_ACTIONS = {
    "reprocess": ObjectAction(
        name="reprocess",
        verb="Reprocess",
        explain="The event goes back to received with a fresh attempt budget and is handed to a worker "
                "now. Its handler runs again, so it must be idempotent on the provider's object id.",
        applies_to=(EventStatus.RECEIVED, EventStatus.RETRY, EventStatus.COMPLETED, EventStatus.IGNORED, EventStatus.DEAD),
        run=processing.reprocess,
        refused=(processing.NotReprocessable,),
        done="Reprocessing {label}: it is {status} and handed to a worker now. The outcome appears here when it lands.",
    ),
    "release": ObjectAction(
        name="release",
        verb="Release",
        explain="Its worker's lease has run out: the event goes back to retry and is handed to a worker "
                "now (or dead, if it has used every attempt). The worker that held it can no longer "
                "complete it.",
        applies_to=(EventStatus.PROCESSING,),
        run=processing.release,
        refused=(processing.NotStuck,),
        done="Released {label} from its stuck worker: it is {status} now.",
        danger=True,
    ),
}


def _event_label(event: WebhookEvent) -> str:
    return f"event {event.provider_event_id or event.dedupe_key}"


@require_http_methods(["GET", "POST"])
@operator_required
def event_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    event = get_object_or_404(WebhookEvent.objects.select_related("endpoint"), pk=pk)
    return run_object_action(
        request, event, EVENT_ACTIONS[action], label=_event_label(event),
        url_name=f"dashboard:event_{action}", detail_url=reverse("dashboard:event", args=[pk]),
        summary=_event_summary,
    )


# --- rejected deliveries -----------------------------------------------------------------------


@require_GET
@viewer_required
def rejected(request: HttpRequest) -> HttpResponse:
    # The excerpt is at most 256 printable characters of the body, never a header: a
    # signature or secret cannot reach this page.
    form = RejectedFilter(request.GET)
    return filtered_list(request, form, lambda: (form.rejections(), "received_at", True), "dashboard/rejected.html",
                         "dashboard/partials/rejected_table.html")


# --- outbox -------------------------------------------------------------------------------------


@require_GET
@viewer_required
def outbox(request: HttpRequest) -> HttpResponse:
    form = OutboxFilter(request.GET)
    return filtered_list(request, form, lambda: (form.messages(), "created_at", True), "dashboard/outbox.html",
                         "dashboard/partials/outbox_table.html",
                         {"actions": OutboxMessage.objects.order_by("action").values_list("action", flat=True).distinct()})


ATTEMPT_LIMIT = 300


def _message_summary(message: OutboxMessage) -> tuple[str, dict[str, Any]]:
    now = timezone.now()
    return "dashboard/partials/outboxmessage_summary.html", {
        "message": message,
        "now": now,
        "stuck": message.status == MessageStatus.IN_FLIGHT and message.lease_expires_at and message.lease_expires_at < now,
        # Not final: the page polls its summary and attempts until the outcome lands.
        "live": message.status in (MessageStatus.PENDING, MessageStatus.RETRY, MessageStatus.IN_FLIGHT),
    }


@require_GET
@viewer_required
def message_detail(request: HttpRequest, pk: int) -> HttpResponse:
    message = get_object_or_404(OutboxMessage, pk=pk)
    log, attempt_total = latest(OutboxAttempt.objects.filter(message=message), "-created_at", "-id", limit=ATTEMPT_LIMIT)
    _, context = _message_summary(message)
    return render(request, "dashboard/message_detail.html", {
        **context,
        "attempts": log,
        "attempt_total": attempt_total,
        "payload_pretty": _pretty(masked_payload(message.payload)),
        "audit": queries.audit_of(message),
    })


MESSAGE_ACTIONS = {
    "send_now": ObjectAction(
        name="send_now",
        verb="Send now",
        explain="The message is due now instead of at its backoff time, with the attempts it has left: "
                "the running drain sends it within seconds.",
        applies_to=(MessageStatus.PENDING, MessageStatus.RETRY),
        run=outbox_store.send_now,
        refused=(outbox_store.InvalidTransition,),
        done="Sending {label} now: it is due now. The outcome appears here when it lands.",
    ),
    "send_again": ObjectAction(
        name="send_again",
        verb="Send again",
        explain="The dead message gets a fresh set of attempts and is due now: the running drain sends "
                "it within seconds. Its key goes downstream unchanged, so a receiver that honours "
                "Idempotency-Key absorbs a repeat.",
        applies_to=(MessageStatus.DEAD,),
        run=outbox_store.send_again,
        refused=(outbox_store.InvalidTransition,),
        done="Sending {label} again: a fresh set of attempts, due now. The outcome appears here when it lands.",
    ),
    "release": ObjectAction(
        name="release",
        verb="Release",
        explain="Its drainer's lease has run out: the message goes back to retry, due now. The drainer "
                "may have sent it already; the key lets the receiver absorb the repeat.",
        applies_to=(MessageStatus.IN_FLIGHT,),
        run=outbox_store.release,
        refused=(outbox_store.InvalidTransition,),
        done="Released {label} from its stuck drainer: it is {status} now, due now.",
        danger=True,
    ),
}


@require_http_methods(["GET", "POST"])
@operator_required
def message_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    message = get_object_or_404(OutboxMessage, pk=pk)
    return run_object_action(
        request, message, MESSAGE_ACTIONS[action], label=f"message {message.key}",
        url_name=f"dashboard:message_{action}", detail_url=reverse("dashboard:message", args=[pk]),
        summary=_message_summary,
    )
