"""Small builders: receipts in a known state, made through the real store."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import time_machine
from django.db import connections
from django.utils import timezone

from receipts import store, waiting
from receipts.models import Receipt
from tests.waits import until

SCOPE = "client:shop"


def completed(key: str, operation: str = "payment.create", request: Any = None, **kw: Any) -> Receipt:
    claim = store.claim(kw.get("scope", SCOPE), key, operation, request if request is not None else {"key": key})
    store.complete(store.Held(claim.receipt.scope, key, claim.token), response_status=201,
                   content_type="application/json", body='{"id": "ch_1"}')
    return Receipt.objects.get(scope=claim.receipt.scope, key=key)


def failed(key: str, operation: str = "payment.create", *, retryable: bool = True, scope: str = SCOPE,
           error: str = "card_declined") -> Receipt:
    claim = store.claim(scope, key, operation, {"key": key})
    store.fail(store.Held(scope, key, claim.token), error=error, retryable=retryable)
    return Receipt.objects.get(scope=scope, key=key)


def stuck(key: str, operation: str = "payment.create", minutes_ago: int = 10) -> Receipt:
    """Claimed `minutes_ago`, never settled: its 30 s lease has long run out."""
    with time_machine.travel(timezone.now() - timedelta(minutes=minutes_ago), tick=False):
        store.claim(SCOPE, key, operation, {"key": key})
    return Receipt.objects.get(scope=SCOPE, key=key)


def mismatched(key: str, stored: Any, rejected: Any) -> Receipt:
    claim = store.claim(SCOPE, key, "payment.create", stored)
    store.complete(store.Held(SCOPE, key, claim.token), response_status=201, body="{}")
    store.claim(SCOPE, key, "payment.create", rejected)
    return Receipt.objects.get(scope=SCOPE, key=key)


def waited_for(key: str, waiters: int, operation: str = "email.send") -> Receipt:
    """A first attempt that runs until `waiters` simultaneous callers (threads, each on its
    own connection) wait for it, then completes: they get its result, logged as `waited`.
    Needs a transactional test (the threads must see the claim) and RECEIPTS_MAX_WAITERS >= waiters."""
    first = store.claim(SCOPE, key, operation, {"key": key})

    def wait() -> None:
        try:
            store.claim(SCOPE, key, operation, {"key": key}, wait_seconds=30)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wait) for _ in range(waiters)]
    for t in threads:
        t.start()
    until(lambda: waiting.waiting_now() >= waiters, "the callers wait", every=0.01)
    store.complete(store.Held(SCOPE, key, first.token), response_status=201, content_type="application/json", body='{"id": "em_1"}')
    for t in threads:
        t.join(30)
    return Receipt.objects.get(scope=SCOPE, key=key)


def _at(moment, fn, *args, **kwargs):
    with time_machine.travel(moment, tick=False):
        return fn(*args, **kwargs)


def known_traffic(now) -> None:
    """Claim traffic with known figures, placed relative to `now` (see EXPECTED_STATS).

    Driven through the real JSON API (POST /api/v1/receipts/claim|complete|fail with a
    bearer token of the client `shop`, whose scope is SCOPE), at known instants.
    """
    import json
    from types import SimpleNamespace

    from django.test import Client

    from idemdash.core.clients import create_token

    m, h, d = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
    s = timedelta(seconds=1)
    op = "email.send"
    api = Client()
    auth = {"Authorization": f"Bearer {create_token(SCOPE.removeprefix('client:'))[1]}"}

    def call(at, endpoint, body, expect):
        with time_machine.travel(at, tick=False):
            response = api.post(f"/api/v1/receipts/{endpoint}", data=json.dumps(body),
                                content_type="application/json", headers=auth)
        assert response.status_code in expect, (endpoint, body, response.status_code, response.content)
        return response

    def claim(at, key, request=None):
        body = {"key": key, "operation": op, "request": request if request is not None else {"k": key}}
        return SimpleNamespace(token=call(at, "claim", body, (200, 201, 409, 422)).json().get("token"))

    def complete(at, key, token):
        call(at, "complete", {"key": key, "token": token, "response": {}}, (200,))

    def fail(at, key, token):
        call(at, "fail", {"key": key, "token": token, "error": "boom"}, (200,))

    # --- the last hour ----------------------------------------------------------------
    c = claim(now - 50 * m, "a1"); complete(now - 50 * m + s, "a1", c.token)
    claim(now - 40 * m, "a1"); claim(now - 30 * m, "a1")                       # 2 replays
    c = claim(now - 20 * m, "a2")
    claim(now - 20 * m + s, "a2"); claim(now - 20 * m + 2 * s, "a2")           # 2 x 409
    complete(now - 20 * m + 3 * s, "a2", c.token)
    c = claim(now - 10 * m, "a3"); complete(now - 10 * m + s, "a3", c.token)
    claim(now - 9 * m, "a3", {"k": "other"})                                     # 422
    claim(now - 5 * m, "a4")                                                     # never settled: stuck
    # --- earlier in the last 24 hours --------------------------------------------------
    c = claim(now - 10 * h, "b1"); fail(now - 10 * h + s, "b1", c.token)
    c = claim(now - 9 * h, "b1"); fail(now - 9 * h + s, "b1", c.token)          # retried, failed again
    claim(now - 8 * h, "b2")
    c = claim(now - 7 * h, "b2"); complete(now - 7 * h + s, "b2", c.token)      # lease takeover
    c = claim(now - 3 * h, "b3"); complete(now - 3 * h + s, "b3", c.token)
    claim(now - 2 * h, "b3")                                                     # replay
    # --- three days ago ----------------------------------------------------------------
    c = claim(now - 3 * d, "c1"); fail(now - 3 * d + s, "c1", c.token)
    c = claim(now - 3 * d + m, "c2"); complete(now - 3 * d + m + s, "c2", c.token)
    claim(now - 3 * d + 2 * m, "c2", {"k": "other"})                             # 422
    # --- twenty days ago ---------------------------------------------------------------
    c = claim(now - 20 * d, "d1"); complete(now - 20 * d + s, "d1", c.token)
    claim(now - 20 * d + m, "d1")                                                # replay
    # --- forty days ago: outside every window ------------------------------------------
    c = claim(now - 40 * d, "e1"); fail(now - 40 * d + s, "e1", c.token)


# Counted by hand from known_traffic.
EXPECTED_STATS = {
    "1h": {"requests": 9, "claimed": 4, "replayed": 2, "concurrent_duplicates": 2, "waited": 0,
           "mismatch_conflicts": 1, "duplicate_rate": 0.5556, "failed": 0, "stuck": 1},
    "24h": {"requests": 15, "claimed": 9, "replayed": 3, "concurrent_duplicates": 2, "waited": 0,
            "mismatch_conflicts": 1, "duplicate_rate": 0.4, "failed": 1, "stuck": 1},
    "7d": {"requests": 18, "claimed": 11, "replayed": 3, "concurrent_duplicates": 2, "waited": 0,
           "mismatch_conflicts": 2, "duplicate_rate": 0.3889, "failed": 2, "stuck": 1},
    "30d": {"requests": 20, "claimed": 12, "replayed": 4, "concurrent_duplicates": 2, "waited": 0,
            "mismatch_conflicts": 2, "duplicate_rate": 0.4, "failed": 2, "stuck": 1},
}


# --- webhook events and outbox messages, through the real store functions --------------------

def webhook_event(event_id: str, status: str = "received", *, slug: str = "stripe", provider: str = "stripe",
                  event_type: str = "invoice.paid", payload: Any = None, minutes_ago: int = 0):
    """An event stored by webhooks.receive.store_delivery, then moved to `status` by the
    worker's own functions (dead: a failed last attempt; processing past its lease: a claim
    `minutes_ago` that never settled)."""
    from django.conf import settings

    from webhooks import processing
    from webhooks.models import WebhookEndpoint, WebhookEvent
    from webhooks.receive import store_delivery
    from webhooks.verify import VerifiedDelivery

    endpoint, _ = WebhookEndpoint.objects.get_or_create(slug=slug, defaults={"provider": provider})
    moment = timezone.now() - timedelta(minutes=minutes_ago)
    verified = VerifiedDelivery(0, payload if payload is not None else {"id": event_id, "type": event_type},
                                event_id, event_type, event_id, "")
    with time_machine.travel(moment, tick=False):
        event = store_delivery(endpoint, verified).event
        if status in ("processing", "dead", "retry", "completed"):
            event = processing.claim_event(event.pk)
        if status == "dead":
            WebhookEvent.objects.filter(pk=event.pk).update(attempts=settings.WEBHOOKS_MAX_ATTEMPTS)
            event.refresh_from_db()
            processing.fail_event(event, "Traceback (most recent call last):\n  ...\nRuntimeError: ledger down")
        elif status == "retry":
            processing.fail_event(event, "RuntimeError: try again")
        elif status == "completed":
            processing.complete_event(event)
    return WebhookEvent.objects.get(pk=event.pk)


def outbox_message(key: str, status: str = "pending", *, action: str = "email.send", minutes_ago: int = 0,
                   payload: Any = None):
    """A message enqueued through receipts.outbox.store and moved to `status` by the drain's
    own functions (in_flight: claimed `minutes_ago` by a drainer that never came back)."""
    from receipts.outbox import store as outbox_store
    from receipts.outbox.models import OutboxMessage

    if payload is None:
        payload = {"to": "ops@example.com", "subject": key, "body": "hi"} if action == "email.send" else {
            "url": "http://127.0.0.1:9/hook", "json": {"key": key}, "headers": {"Authorization": "Bearer s3cret-token"}}
    with time_machine.travel(timezone.now() - timedelta(minutes=minutes_ago), tick=False):
        message = outbox_store.enqueue(action, payload, key).message
        if status != "pending":
            # The drain claims every due message, stuck ones included: build several
            # newest first, so that each claim finds only its own message due.
            (message,) = outbox_store.claim_batch("test-drainer", batch_size=100)
            assert message.key == key, "another message was due: build stuck messages newest first"
        if status == "dead":
            outbox_store.mark_failed(message, "HTTP 400: bad request", permanent=True, status_code=400, drainer="test-drainer")
        elif status == "retry":
            outbox_store.mark_failed(message, "HTTP 503", status_code=503, drainer="test-drainer")
        elif status == "sent":
            outbox_store.mark_sent(message, status_code=200, duration_ms=12, drainer="test-drainer")
    return OutboxMessage.objects.get(pk=message.pk)


def confirm_bulk(client, url: str, data: dict[str, str]) -> tuple[Any, str]:
    """Confirm a bulk action and do the worker's part in this process (idemdash/core/bulk.py:
    advance, the task's body): the run and its page, as the operator is sent to it."""
    from idemdash.core import bulk_runs

    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:500]
    run = bulk_runs.BulkRun.objects.get(pk=int(response["Location"].split("/bulk/")[1].split("/")[0]))
    bulk_runs.advance(run.pk)
    run.refresh_from_db()
    return run, client.get(response["Location"]).content.decode()


# --- references and causes, through run_once and a real handler run ---------------------------------

def charged(key: str, charge: str, *, order: str = "1042"):
    """A receipt whose step referred to a charge and an order and enqueued a receipt email:
    (receipt, message)."""
    import receipts
    from receipts.outbox import store as outbox_store

    def step() -> None:
        receipts.current().refer("stripe.charge", charge)
        receipts.current().refer("order", order)
        outbox_store.enqueue("email.send", {"to": "buyer@example.com", "subject": f"Receipt {charge}", "body": "hi"},
                             f"receipt-mail-{charge}")

    receipts.run_once(key, "payment.create", step, scope=SCOPE)
    from receipts.outbox.models import OutboxMessage

    return Receipt.objects.get(scope=SCOPE, key=key), OutboxMessage.objects.get(key=f"receipt-mail-{charge}")


def handled_event(event_id: str, charge: str):
    """A Stripe event whose handler referred to a charge and enqueued a notification, processed
    by the worker's own function: (event, message)."""
    from receipts.outbox import store as outbox_store
    from receipts.outbox.models import OutboxMessage
    from webhooks import handlers, processing

    def handler(event) -> None:
        event.refer("stripe.charge", charge)
        outbox_store.enqueue("http.post", {"url": "http://127.0.0.1:9/hook", "json": {"charge": charge}}, f"notify-{charge}")

    handlers.webhook_handler("stripe", "charge.succeeded")(handler)
    try:
        event = webhook_event(event_id, event_type="charge.succeeded")
        assert processing.process_event(event.pk) == "completed"
    finally:
        handlers.unregister("stripe", "charge.succeeded")
    event.refresh_from_db()
    return event, OutboxMessage.objects.get(key=f"notify-{charge}")
