"""Who refers to a value (the receipts, webhook events and outbox messages given a reference
with it) and which messages a receipt or an event caused: index lookups, each optional app
asked only when installed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.apps import apps
from django.db.models import Model, QuerySet

from idemdash.core.reference_rows import referring
from idemdash_client.references import RECEIPT, WEBHOOK_EVENT
from receipts.models import Receipt, ReceiptReference

# Objects of each kind one question returns at most: a value hundreds share is not an id.
LIMIT = 100


@dataclass
class Referring:
    """The objects that refer to one value, newest first, LIMIT of each kind at most."""

    receipts: list[Receipt] = field(default_factory=list)
    events: list[Model] = field(default_factory=list)
    messages: list[Model] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.receipts or self.events or self.messages)


def _webhooks() -> bool:
    return apps.is_installed("webhooks")


def _outbox() -> bool:
    return apps.is_installed("receipts.outbox")


def objects_referring(value: str, kind: str | None = None, *, limit: int = LIMIT) -> Referring:
    """Every receipt, webhook event and outbox message with a reference `value` (of `kind`)."""
    found = Referring(receipts=list(referring(Receipt, value, kind).order_by("-created_at")[:limit]))
    if _webhooks():
        found.events = list(referring(apps.get_model("webhooks", "WebhookEvent"), value, kind).order_by("-received_at")[:limit])
    if _outbox():
        found.messages = list(referring(apps.get_model("outbox", "OutboxMessage"), value, kind).order_by("-created_at")[:limit])
    return found


def caused_by(cause: Receipt | Model) -> QuerySet:
    """The outbox messages enqueued while `cause` (a receipt or a webhook event) ran."""
    message = apps.get_model("outbox", "OutboxMessage")
    kind = RECEIPT if isinstance(cause, Receipt) else WEBHOOK_EVENT
    return message.objects.filter(cause_kind=kind, cause_id=cause.pk).order_by("created_at", "pk")


def cause_of(message: Any) -> Receipt | Model | None:
    """The receipt or webhook event a message was enqueued under; None when none, or purged."""
    if message.cause_kind == RECEIPT:
        return Receipt.objects.filter(pk=message.cause_id).first()
    if message.cause_kind == WEBHOOK_EVENT and _webhooks():
        return apps.get_model("webhooks", "WebhookEvent").objects.filter(pk=message.cause_id).first()
    return None


@dataclass
class SideEffects:
    """What is on record as done for a unit an operator is about to run again, shown before
    the click: the outbox `messages` it caused (for a message, itself), and the other
    completed `receipts` under one of its references."""

    messages: list[Model] = field(default_factory=list)
    receipts: list[Receipt] = field(default_factory=list)

    @property
    def sent(self) -> list[Model]:
        return [m for m in self.messages if m.status == "sent"]

    def __bool__(self) -> bool:
        return bool(self.messages or self.receipts)


def side_effects_on_record(unit: Any, *, limit: int = 20) -> SideEffects:
    """SideEffects of a receipt, a webhook event or an outbox message (index lookups only)."""
    found = SideEffects()
    if _outbox():
        # A message is the effect itself: sending it again repeats it downstream.
        is_message = isinstance(unit, apps.get_model("outbox", "OutboxMessage"))
        found.messages = [unit] if is_message else list(caused_by(unit)[:limit])
    values = list(unit.references.values_list("value", flat=True)[:limit]) if hasattr(unit, "references") else []
    if values:
        others = Receipt.objects.filter(
            status=Receipt.Status.COMPLETED, pk__in=ReceiptReference.objects.filter(value__in=values).values("receipt_id")
        )
        if isinstance(unit, Receipt):
            others = others.exclude(pk=unit.pk)
        found.receipts = list(others.order_by("-completed_at")[:limit])
    return found


def with_sent_side_effects(units: QuerySet) -> int:
    """How many of `units` (receipts or webhook events) caused a message that was sent."""
    if not _outbox():
        return 0
    message = apps.get_model("outbox", "OutboxMessage")
    kind = RECEIPT if units.model is Receipt else WEBHOOK_EVENT
    sent = message.objects.filter(cause_kind=kind, status="sent").values("cause_id")
    return units.filter(pk__in=sent).count()
