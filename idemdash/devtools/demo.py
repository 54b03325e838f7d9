"""`make demo`'s staged outages, so that a first run has something to repair (docs/demo.md);
the alert rules that page for them are those migrate installs (idemdash/dashboard/alerts.py:DEFAULT_RULES).

- The Shopify `refunds/create` handler fails while the `refunds` switch is on: its events go
  dead until an operator turns the switch off ("Fix") and reprocesses them.
- A refund handled before the bug (`stage_sent_refund`): a reprocess's preflight lists its
  confirmation email as already sent.
The simulator stages the other outages, which need nothing in the database."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from idemdash.core import audit
from idemdash.devtools.models import DemoSwitch

REFUNDS = "refunds"

SWITCHES = {
    REFUNDS: "Shopify refunds/create: the demo handler fails while this is on (a staged bug). "
             "Turn it off, then reprocess the dead events.",
}

ACTOR = "demo_setup"


class DemoOutage(RuntimeError):
    """Raised by a demo handler while its switch is on."""


# Set while `stage_sent_refund` runs a handler "before the bug shipped": in this context only,
# so that the web server and the worker keep seeing the switch as it is.
_before_the_bug: contextvars.ContextVar[bool] = contextvars.ContextVar("demo_before_the_bug", default=False)


def failing(name: str) -> bool:
    """Whether the demo outage `name` is on. No row (the demo was never set up): off."""
    if _before_the_bug.get():
        return False
    return DemoSwitch.objects.filter(name=name, failing=True).exists()


@contextmanager
def before_the_bug() -> Iterator[None]:
    token = _before_the_bug.set(True)
    try:
        yield
    finally:
        _before_the_bug.reset(token)


def check(name: str) -> None:
    if failing(name):
        raise DemoOutage(f"demo outage {name!r}: {SWITCHES[name]} "
                         "(admin: /admin/devtools/demoswitch/, select it, action \"Fix\")")


def set_failing(switch: DemoSwitch, on: bool, *, actor: str, user: Any = None) -> bool:
    """Turn a switch on or off, recorded in the audit log; False if it already was."""
    before, after = ("fixed", "failing") if on else ("failing", "fixed")
    with transaction.atomic():
        # Conditional, so that two flips at once record one change; update() skips auto_now.
        changed = DemoSwitch.objects.filter(pk=switch.pk, failing=not on).update(failing=on, updated_at=timezone.now())
        if changed != 1:
            return False
        audit.record(actor, "demo_switch.break" if on else "demo_switch.fix", switch,
                     status_before=before, status_after=after, user=user)
    switch.refresh_from_db()
    return True


def setup() -> list[str]:
    """Arm every demo outage (each `make demo` starts broken); the switches armed now."""
    armed = []
    for name, description in SWITCHES.items():
        switch, created = DemoSwitch.objects.get_or_create(name=name, defaults={"description": description})
        if created or set_failing(switch, True, actor=ACTOR):
            armed.append(name)
    return armed


# The preflight's case: a refund already handled, its confirmation already sent.
STAGED_SHOP = "idemdash-demo.myshopify.com"
STAGED_REFUND = {
    "id": 8300000000001, "order_id": 8200000000001, "note": "staged by demo_stage: handled before the refunds bug shipped",
    "refund_line_items": [], "transactions": [{"kind": "refund", "status": "success", "amount": "42.00", "currency": "EUR"}],
}
STAGED_WEBHOOK_ID = "demo-staged-refund-8300000000001"


def refund_confirmation_key(shop: str, refund_id: object) -> str:
    """The outbox key of a refund's confirmation email: one per refund, whoever runs its event."""
    return f"refund-confirmation-{shop}-{refund_id}"


@dataclass
class StagedRefund:
    event_id: int
    message_id: int
    created: bool


def stage_sent_refund() -> StagedRefund | None:
    """A Shopify refunds/create event handled before the staged bug, its confirmation email
    sent, through the real code (store, process, send), once. None without a Shopify endpoint."""
    # Imported here: the webhooks app imports the demo's handlers, which import this module.
    from receipts.outbox.drain import drain
    from receipts.outbox.models import OutboxMessage
    from webhooks import processing
    from webhooks.endpoints import ensure_env_endpoints
    from webhooks.models import WebhookEndpoint
    from webhooks.receive import store_delivery
    from webhooks.verify import VerifiedDelivery

    ensure_env_endpoints()
    endpoint = WebhookEndpoint.objects.filter(slug="shopify", provider="shopify").first()
    if endpoint is None:
        return None
    stored = store_delivery(endpoint, VerifiedDelivery(
        secret_index=0, payload=STAGED_REFUND, dedupe_key=f"{STAGED_SHOP}:{STAGED_WEBHOOK_ID}",
        event_type="refunds/create", provider_event_id=STAGED_WEBHOOK_ID, account=STAGED_SHOP,
    ))
    if stored.created:
        with before_the_bug():
            processing.process_event(stored.event_id)
    key = refund_confirmation_key(STAGED_SHOP, STAGED_REFUND["id"])
    message = OutboxMessage.objects.filter(key=key).first()
    if message is None:  # the event was stored but not processed (an earlier run stopped midway)
        return StagedRefund(stored.event_id, 0, stored.created)
    if message.status != "sent":
        drain(ids=[message.pk])  # the worker would within seconds; now, so the case is ready at start
    return StagedRefund(stored.event_id, message.pk, stored.created)
