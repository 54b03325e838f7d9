"""The demo's webhook handlers (idemdash/devtools/webhook_handlers.py): one fulfilment per
Stripe payment, one row per Shopify order, through the real receiver and processing."""

from __future__ import annotations

import json

import pytest

from idemdash.devtools.models import Fulfilment, ShopifyOrder
from tests.webhooks.conftest import (  # noqa: F401 (fixtures3 and _no_env_secrets are fixtures)
    LOCAL_OBJECTS,
    SHOPIFY_SECRET,
    _no_env_secrets,
    deliver,
    deliver_stripe,
    fixtures3,
    make_endpoint,
    shopify_headers,
    stripe_event,
)
from webhooks import processing
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


def process_all() -> list[str]:
    return [processing.process_event(pk) for pk in WebhookEvent.objects.order_by("pk").values_list("pk", flat=True)]


def fulfil_one_payment(client, session: dict, intent: dict) -> None:
    make_endpoint("shop", "stripe", "whsec_demo_handlers_00000000")
    secret = "whsec_demo_handlers_00000000"
    completed = stripe_event(session, "checkout.session.completed")
    succeeded = stripe_event(intent, "payment_intent.succeeded")
    for payload in (completed, succeeded, completed, succeeded):
        assert deliver_stripe(client, "shop", payload, secret=secret).status_code == 200
    assert process_all() == ["completed", "completed"]


def test_a_payment_announced_by_two_events_is_fulfilled_once(client):
    session, intent = LOCAL_OBJECTS["checkout.session"], LOCAL_OBJECTS["payment_intent"]
    fulfil_one_payment(client, session, intent)
    fulfilment = Fulfilment.objects.get()
    assert (fulfilment.payment_id, fulfilment.amount, fulfilment.currency) == ("pi_local_0001", 2500, "eur")


def test_a_real_checkout_session_and_its_payment_intent_are_fulfilled_once(client, fixtures3):
    session, intent = fixtures3["checkout.session"], fixtures3["payment_intent"]
    assert session["payment_intent"] == intent["id"]  # the fixture's session paid by this intent
    fulfil_one_payment(client, session, intent)
    assert list(Fulfilment.objects.values_list("payment_id", flat=True)) == [intent["id"]]


def test_reprocessing_a_fulfilled_payment_does_not_fulfil_it_again(client):
    fulfil_one_payment(client, LOCAL_OBJECTS["checkout.session"], LOCAL_OBJECTS["payment_intent"])
    for event in WebhookEvent.objects.all():
        processing.reprocess(event, actor="ops")
    assert process_all() == ["completed", "completed"]
    assert Fulfilment.objects.count() == 1


def test_a_shopify_order_is_recorded_once(client):
    make_endpoint("store", "shopify", SHOPIFY_SECRET)
    body = json.dumps({"id": 820982911946154508, "name": "#9999", "total_price": "199.65", "currency": "USD"}).encode()
    # Shopify retries with the same webhook id; a second subscription sends another id for the
    # same event, and the event is received once; a new event for the same order (another
    # event id) runs the handler again, which records the order once.
    for webhook_id, event_id in (("w1", "e1"), ("w1", "e1"), ("w2", "e1"), ("w3", "e2")):
        deliver(client, "store", body, shopify_headers(body, SHOPIFY_SECRET, webhook_id=webhook_id, event_id=event_id))
    assert process_all() == ["completed", "completed"]
    order = ShopifyOrder.objects.get()
    assert (order.shop_domain, order.order_id, order.name, order.total_price) == (
        "demo.myshopify.com", "820982911946154508", "#9999", "199.65",
    )
