"""The demo's webhook handlers, registered only where the devtools app is installed, so that a
host's own handlers for these event types start cleanly.

A Stripe payment is fulfilled once, a Shopify order recorded once: each by a unique insert on
the provider's object id (`_insert_once`), not on the event, as Stripe announces one payment
with two events and an operator may reprocess an event."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError, transaction

from idemdash.devtools import demo
from idemdash.devtools.models import Fulfilment, ShopifyOrder
from receipts.outbox import store as outbox
from webhooks.handlers import webhook_handler
from webhooks.models import WebhookEvent


def _insert_once(model: type, **fields: Any) -> bool:
    try:
        with transaction.atomic():
            model.objects.create(**fields)
    except IntegrityError:
        return False
    return True


def _stripe_object(event: WebhookEvent) -> dict[str, Any]:
    return event.payload["data"]["object"]


@webhook_handler("stripe", "checkout.session.completed")
def fulfil_checkout(event: WebhookEvent) -> None:
    session = _stripe_object(event)
    # The payment intent, when there is one, so that its own succeeded event matches.
    payment_id = session.get("payment_intent") or session["id"]
    if isinstance(payment_id, dict):  # an expanded object
        payment_id = payment_id["id"]
    _insert_once(Fulfilment, payment_id=payment_id, amount=session.get("amount_total"),
                 currency=session.get("currency") or "", source_event=event)


@webhook_handler("stripe", "payment_intent.succeeded")
def fulfil_payment(event: WebhookEvent) -> None:
    intent = _stripe_object(event)
    _insert_once(Fulfilment, payment_id=intent["id"], amount=intent.get("amount_received") or intent.get("amount"),
                 currency=intent.get("currency") or "", source_event=event)


@webhook_handler("shopify", "orders/create")
def record_order(event: WebhookEvent) -> None:
    order = event.payload
    _insert_once(ShopifyOrder, shop_domain=event.account, order_id=str(order["id"]),
                 name=str(order.get("name") or "")[:64], total_price=str(order.get("total_price") or "")[:32],
                 currency=str(order.get("currency") or "")[:8], source_event=event)


@webhook_handler("shopify", "refunds/create")
def acknowledge_refund(event: WebhookEvent) -> None:
    """The staged bug: fails while the `refunds` demo switch is on (idemdash.devtools.demo).
    With the switch off, or never set up, it enqueues the refund's confirmation email under a
    key of its own (one per refund), so reprocessing a refund's event adds no second email;
    sending the message again does."""
    # The demo keeps no refund ledger: the customer's confirmation is the side effect.
    refund = event.payload
    event.refer("shopify.order", str(refund["order_id"]))  # kept even when the handler fails
    demo.check(demo.REFUNDS)
    outbox.enqueue("email.send", {
        "to": f"customer-{refund['order_id']}@example.com", "subject": f"Your refund for order {refund['order_id']}",
        "body": f"We have refunded your order {refund['order_id']} (refund {refund['id']}).",
    }, demo.refund_confirmation_key(event.account, refund["id"]), references=[("shopify.order", str(refund["order_id"]))])
