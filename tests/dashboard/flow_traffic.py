"""Webhook and outbox traffic with known figures, driven through the real endpoints:
signed Stripe deliveries to POST /webhooks/<slug>/, outbox messages to POST /api/v1/outbox
with a bearer token, and the worker's and the drain's own functions, each at a known
instant. EXPECTED_FLOW holds the figures counted by hand from it.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import time_machine
from django.test import Client

from idemdash.core.clients import create_token
from receipts.outbox import drain, store as outbox_store
from tests.webhooks.conftest import STRIPE_SECRET, body_of, deliver, make_endpoint, stripe_event, stripe_headers
from webhooks import handlers, processing
from webhooks.models import WebhookEvent

SLUG = "stripe-live"
FAILING_TYPE = "invoice.payment_failed"  # its handler always raises: these events die


def _broken_handler(event: WebhookEvent) -> None:
    raise RuntimeError("downstream ledger is down")


def outbox_receiver_policy(key: str, nth: int, body: Any) -> tuple[int, dict[str, str], float]:
    """The local receiver answers by what the message asks for: 400 is permanent (dead at
    once), 503 is retried (with the test's long backoff the message stays waiting)."""
    return int((body or {}).get("answer", 200)), {}, 0.0


def known_flow_traffic(now: datetime, receiver_url: str) -> dict[str, int]:
    """Returns the ids tests look at by name. Run with a test's settings where
    WEBHOOKS_MAX_ATTEMPTS is 1 and the outbox backoff is days long (see the fixture)."""
    m, h, d = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
    web = Client()
    make_endpoint(SLUG, "stripe", STRIPE_SECRET)
    handlers.webhook_handler("stripe", FAILING_TYPE)(_broken_handler)
    _, token = create_token("shop-outbox")
    api = Client()
    auth = {"Authorization": f"Bearer {token}"}
    ids: dict[str, int] = {}

    def at(moment: datetime):
        return time_machine.travel(moment, tick=False)

    def delivery(moment: datetime, payload: dict, *, signature_secret: str = STRIPE_SECRET) -> None:
        with at(moment):
            body = body_of(payload)
            response = deliver(web, SLUG, body, stripe_headers(body, signature_secret))
        assert response.status_code == (200 if signature_secret == STRIPE_SECRET else 400), response.content

    def event(event_id: str, event_type: str = "charge.succeeded", **data: Any) -> dict:
        return stripe_event({"id": f"ch_{event_id}", "object": "charge", **data}, event_type, event_id=event_id)

    def process(moment: datetime, event_id: str) -> str:
        with at(moment):
            return processing.process_event(WebhookEvent.objects.get(provider_event_id=event_id).pk)

    def enqueue(moment: datetime, key: str, action: str, payload: dict) -> None:
        with at(moment):
            response = api.post("/api/v1/outbox", data=json.dumps({"key": key, "action": action, "payload": payload}),
                                content_type="application/json", headers=auth)
        assert response.status_code == 201, response.content
        ids[key] = response.json()["id"]

    def email(moment: datetime, key: str) -> None:
        enqueue(moment, key, "email.send", {"to": "ops@example.com", "subject": key, "body": "hello"})

    def post(moment: datetime, key: str, answer: int) -> None:
        enqueue(moment, key, "http.post", {"url": receiver_url, "json": {"answer": answer}})

    def drain_at(moment: datetime) -> drain.DrainReport:
        with at(moment):
            return drain.drain(drainer="test-drainer")

    # --- webhooks: the last hour ---------------------------------------------------------
    a = event("evt_a")
    delivery(now - 50 * m, a)
    delivery(now - 40 * m, a)                                        # redelivery, same payload
    delivery(now - 30 * m, {**a, "data": {"object": {"id": "ch_evt_a", "amount": 9}}})  # payload differs
    delivery(now - 20 * m, event("evt_b", FAILING_TYPE))
    assert process(now - 19 * m, "evt_b") == "dead"
    delivery(now - 10 * m, event("evt_bad"), signature_secret="whsec_not_the_right_one")  # rejected
    delivery(now - 6 * m, event("evt_g"))
    with at(now - 5 * m):                                            # a worker claims it and dies
        assert processing.claim_event(WebhookEvent.objects.get(provider_event_id="evt_g").pk)
    # --- webhooks: earlier in the last 24 hours ----------------------------------------------
    c = event("evt_c", FAILING_TYPE)
    delivery(now - 5 * h, c)
    assert process(now - 5 * h + m, "evt_c") == "dead"
    delivery(now - 4 * h, c)                                         # redelivered after it died
    delivery(now - 3 * h, event("evt_bad2"), signature_secret="whsec_not_the_right_one")
    # --- webhooks: three, twenty and forty days ago -------------------------------------------
    dd = event("evt_d", FAILING_TYPE)
    delivery(now - 3 * d, dd)
    delivery(now - 3 * d + m, dd)
    assert process(now - 3 * d + 2 * m, "evt_d") == "dead"
    delivery(now - 10 * d, event("evt_bad3"), signature_secret="whsec_not_the_right_one")
    delivery(now - 20 * d, event("evt_e"))
    delivery(now - 40 * d, event("evt_f"))                           # outside every window
    delivery(now - 40 * d, event("evt_bad4"), signature_secret="whsec_not_the_right_one")

    # --- outbox: forty, twenty and three days ago ----------------------------------------------
    email(now - 40 * d, "m10"); drain_at(now - 40 * d + m)          # sent, outside every window
    email(now - 20 * d, "m9"); drain_at(now - 20 * d + m)           # sent
    email(now - 3 * d, "m7"); post(now - 3 * d, "m8", 400)
    report = drain_at(now - 3 * d + m)                               # m7 sent, m8 dead
    assert (report.sent, report.dead) == (1, 1), report
    # --- outbox: earlier in the last 24 hours ----------------------------------------------------
    email(now - 5 * h, "m5"); drain_at(now - 5 * h + m)             # sent
    post(now - 3 * h, "m6", 503)
    assert drain_at(now - 3 * h + m).retried == 1                    # waits for a retry days away
    # --- outbox: the last hour ------------------------------------------------------------------
    email(now - 50 * m, "m1"); drain_at(now - 49 * m)               # sent
    post(now - 40 * m, "m2", 400); drain_at(now - 39 * m)           # dead at once
    email(now - 20 * m, "m4")
    with at(now - 10 * m):                                           # a drainer claims it and dies
        assert [x.key for x in outbox_store.claim_batch("dying-drainer")] == ["m4"]
    email(now - 8 * m, "m3")                                         # not drained yet: pending
    return ids


# Counted by hand from known_flow_traffic: one row per window, the columns named once.
_WEBHOOK_COLUMNS = ("deliveries", "events", "duplicates", "duplicate_rate", "payload_mismatches", "rejected", "dead", "stuck")
_OUTBOX_COLUMNS = ("enqueued", "sent", "pending", "dead", "oldest_pending_age_seconds", "stuck")


def _window(webhooks: tuple, outbox: tuple) -> dict:
    return {"webhooks": dict(zip(_WEBHOOK_COLUMNS, webhooks, strict=True)),
            "outbox": dict(zip(_OUTBOX_COLUMNS, outbox, strict=True))}


EXPECTED_FLOW = {
    #               deliveries events dups rate  mismatch rejected dead stuck   enqueued sent pending dead oldest stuck
    "1h": _window((5, 3, 2, 0.4, 1, 1, 1, 1), (4, 1, 2, 1, 3 * 3600, 1)),
    "24h": _window((7, 4, 3, 0.4286, 1, 2, 2, 1), (6, 2, 2, 1, 3 * 3600, 1)),
    "7d": _window((9, 5, 4, 0.4444, 1, 2, 3, 1), (8, 3, 2, 2, 3 * 3600, 1)),
    "30d": _window((10, 6, 4, 0.4, 1, 3, 3, 1), (9, 4, 2, 2, 3 * 3600, 1)),
}
