"""The demo's staged bug: a Shopify refunds/create handler that fails while the `refunds`
demo switch is on (idemdash.devtools.demo). With the switch off, or never set up, it succeeds."""

from __future__ import annotations

from idemdash.devtools import demo
from webhooks.handlers import webhook_handler
from webhooks.models import WebhookEvent


@webhook_handler("shopify", "refunds/create")
def acknowledge_refund(event: WebhookEvent) -> None:
    # The demo keeps no refund ledger: completing the event is the whole point.
    demo.check(demo.REFUNDS)
