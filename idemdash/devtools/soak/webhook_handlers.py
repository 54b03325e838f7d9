"""The soak's webhook handler: its effect is a bench row labelled with the event's id, written
in the transaction that completes the event (webhooks/processing.py), so a worker killed before
that commit leaves no row and the event is processed again."""

from __future__ import annotations

from idemdash.devtools.bench.models import BenchRow
from idemdash.devtools.soak.views import event_label
from webhooks.handlers import webhook_handler
from webhooks.models import WebhookEvent

EVENT_TYPE = "soak.effect"


@webhook_handler("stripe", EVENT_TYPE)
def soak_effect(event: WebhookEvent) -> None:
    BenchRow.objects.create(label=event_label(event.provider_event_id))
