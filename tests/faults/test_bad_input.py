"""A corpus of bad input across the @idempotent decorator, the JSON API and the three
webhook providers. Each case gets its documented 4xx as `application/problem+json`, never a
500, and leaves the database as it found it, except that a rejected webhook delivery is
recorded as exactly one RejectedDelivery row (documented: the rejection log).

Duplicate JSON object keys are not an error (RFC 8259 only says names SHOULD be unique):
the last one wins, as in Python's json module, everywhere a body is parsed, so the
fingerprint, the stored request and what the caller meant agree. Tests at the end prove it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from idemdash.core.clients import create_token
from receipts.keys import format_key, parse_key
from idemdash.core.models import ApiClient, AuditEntry
from receipts.models import Attempt, Receipt
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from tests.webhooks.conftest import (
    SHOPIFY_SECRET,
    STANDARD_SECRET,
    STRIPE_SECRET,
    make_endpoint,
    shopify_headers,
    standard_headers,
    stripe_event,
    stripe_headers,
)
from idemdash.devtools.models import Fulfilment, ShopifyOrder
from tests.faults.urls import ASYNC_KINDS, VIEW_KINDS
from webhooks.models import RejectedDelivery, WebhookDelivery, WebhookEvent

pytestmark = [pytest.mark.urls("tests.faults.urls"), pytest.mark.django_db]

TABLES = [Receipt, Attempt, AuditEntry, ApiClient, OutboxMessage, OutboxAttempt, WebhookEvent, WebhookDelivery,
          RejectedDelivery, Fulfilment, ShopifyOrder]
BIG = 2_621_440 + 1  # one byte over Django's DATA_UPLOAD_MAX_MEMORY_SIZE
MIB = 1024 * 1024


@dataclass
class World:
    client: Client
    token: str


@pytest.fixture
def world(client: Client, settings) -> World:
    settings.STRIPE_WEBHOOK_SECRET = settings.SHOPIFY_WEBHOOK_SECRET = settings.STANDARD_WEBHOOK_SECRET = ""
    make_endpoint("stripe-in", "stripe", STRIPE_SECRET)
    make_endpoint("shopify-in", "shopify", SHOPIFY_SECRET)
    make_endpoint("standard-in", "standard", STANDARD_SECRET)
    return World(client, create_token("fault-corpus")[1])


def snapshot() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in TABLES}


# --- senders ------------------------------------------------------------------------------

Send = Callable[[World], object]


def as_on_the_wire(value: str) -> str:
    return value.encode("utf-8", "surrogatepass").decode("latin-1")


def view(key: str | None, body: bytes = b'{"amount": 100}', **headers: str) -> Send:
    """A POST to the decorated capture view of `kind` (tests/faults/urls.py:VIEW_KINDS): a
    plain Django view unless the test says which; an async kind as ASGI serves it."""

    def send(w: World, kind: str = "django"):
        if key is not None:
            headers["Idempotency-Key"] = key
        content_type = headers.pop("Content-Type", "application/json")
        if kind in ASYNC_KINDS:
            # ASGI carries header bytes; a server gives them to Django as latin-1 text.
            wire = {name: as_on_the_wire(value) for name, value in headers.items()}
            return async_to_sync(AsyncClient().post)(
                VIEW_KINDS[kind], body, content_type=as_on_the_wire(content_type), headers=wire
            )
        return w.client.post(VIEW_KINDS[kind], body, content_type=content_type, headers=headers)

    send.to_a_view = True  # type: ignore[attr-defined]
    return send


def api(endpoint: str, body: object, *, content_type: str | None = "application/json", auth: str | None = "token",
        method: str = "post") -> Send:
    def send(w: World):
        raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {}
        if auth == "token":
            headers["Authorization"] = f"Bearer {w.token}"
        elif auth is not None:
            headers["Authorization"] = auth
        return w.client.generic(
            method.upper(), f"/api/v1/receipts/{endpoint}", raw, headers=headers, CONTENT_TYPE=content_type or ""
        )

    return send


def claim(body: object, **kw) -> Send:
    return api("claim", body, **kw)


def outbox(payload: str) -> Send:
    def send(w: World):
        body = '{"key": "out-1", "action": "email.send", "payload": ' + payload + "}"
        return w.client.post("/api/v1/outbox", body, content_type="application/json",
                             headers={"Authorization": f"Bearer {w.token}"})

    return send


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def hook(slug: str, body: bytes, headers: dict[str, str]) -> Send:
    def send(w: World):
        return w.client.post(f"/webhooks/{slug}/", body, content_type="application/json", headers=headers)

    return send


def stripe_body(**extra) -> bytes:
    return json.dumps(stripe_event({"id": "pi_1", "object": "payment_intent"}, "payment_intent.succeeded", **extra)).encode()


def stripe(body: bytes | None = None, *, sign: bytes | None = None, secret: str = STRIPE_SECRET,
           skew: int = 0, header: str | None = None) -> Send:
    body = stripe_body() if body is None else body

    def send(w: World):
        # Signed when sent (not when collected), over bytes, so that a non-UTF-8 body can
        # carry a valid signature; `skew` moves the signature's time.
        if header is None:
            signed = sign if sign is not None else body
            ts = int(time.time()) + skew
            mac = hmac.new(secret.encode(), f"{ts}.".encode() + signed, hashlib.sha256).hexdigest()
            headers = {"Stripe-Signature": f"t={ts},v1={mac}"}
        else:
            headers = {"Stripe-Signature": header} if header else {}
        return hook("stripe-in", body, headers)(w)

    return send


def shopify(body: bytes = b'{"id": 1, "name": "#1001"}', *, sign: bytes | None = None, secret: str = SHOPIFY_SECRET,
            drop: tuple[str, ...] = (), **override: str) -> Send:
    headers = shopify_headers(sign if sign is not None else body, secret)
    headers.update(override)
    for name in drop:
        headers.pop(name)
    return hook("shopify-in", body, headers)


def standard_signature(secret: str, msg_id: str, ts: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{ts}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def standard(body: bytes = b'{"type": "invoice.paid", "data": {}}', *, secret: str = STANDARD_SECRET,
             msg_id: str = "msg_1", skew: int = 0, drop: tuple[str, ...] = (), **override: str) -> Send:
    def send(w: World):
        ts = int(time.time()) + skew
        headers = {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": standard_signature(secret, msg_id, ts, body)}
        headers.update({k.replace("_", "-"): v for k, v in override.items()})
        for name in drop:
            headers.pop(name)
        return hook("standard-in", body, headers)(w)

    return send


def case(send: Send, status: int, slug: str, *, cause: str | None = None, field: str | None = None, id: str):
    return pytest.param(send, status, slug, cause, field, id=id)


OTHER_SECRET = "whsec_" + base64.b64encode(b"another-secret-of-thirty-two-byt").decode()

CORPUS = [
    # --- the @idempotent decorator --------------------------------------------------------
    case(view(None), 400, "idempotency-key-missing", id="a decorated view without a key is 400 missing"),
    case(view(""), 400, "idempotency-key-invalid", id="an empty key is 400 invalid"),
    case(view("   "), 400, "idempotency-key-invalid", id="a key of spaces only is 400 invalid"),
    case(view("k" * 256), 400, "idempotency-key-invalid", id="a 256 character key is 400 invalid"),
    case(view("clé-de-paiement"), 400, "idempotency-key-invalid", id="a key with a non ascii letter is 400 invalid"),
    case(view("🔑-1"), 400, "idempotency-key-invalid", id="a key with an emoji is 400 invalid"),
    case(view("order\x017"), 400, "idempotency-key-invalid", id="a key with a control character is 400 invalid"),
    case(view("order\t7"), 400, "idempotency-key-invalid", id="a key with a tab is 400 invalid"),
    case(view("order\x7f7"), 400, "idempotency-key-invalid", id="a key with DEL is 400 invalid"),
    case(view("k1\r\nX-Injected: yes"), 400, "idempotency-key-invalid", id="a key with a CRLF header injection is 400 invalid"),
    case(view('""'), 400, "idempotency-key-invalid", id="an empty quoted sf string key is 400 invalid"),
    case(view('"' + "k" * 256 + '"'), 400, "idempotency-key-invalid", id="an overlong quoted key is 400 invalid"),
    case(view('"order\n7"'), 400, "idempotency-key-invalid", id="a quoted key with a newline is 400 invalid"),
    case(view("k-big", b"x" * BIG), 413, "payload-too-large", id="a decorated view refuses a body over the upload limit with 413"),
    case(view("k-sur", b'{"note": "\\ud800"}'), 400, "invalid-json", id="a decorated view refuses a lone surrogate escape in its json body"),
    case(view("k-sur", b'{"\\udfff": 1}'), 400, "invalid-json", id="a decorated view refuses a lone surrogate in a json name"),
    case(view("k-sur", b'{"note": "\xed\xa0\x80"}'), 400, "invalid-json", id="a decorated view refuses the raw bytes of a lone surrogate"),
    case(view("k-nan", b'{"amount": NaN}'), 400, "invalid-json", id="a decorated view refuses NaN in its json body"),
    case(view("k-inf", b'{"amount": 1e400}'), 400, "invalid-json", id="a decorated view refuses a number beyond a double"),
    case(view("a,b"), 400, "idempotency-key-invalid", id="two keys joined by the server are 400 invalid"),
    case(view("order-7, order-7"), 400, "idempotency-key-invalid", id="the same key sent twice is 400 invalid"),
    case(view('"a", "b"'), 400, "idempotency-key-invalid", id="two quoted keys joined by the server are 400 invalid"),
    case(view('"a","b"'), 400, "idempotency-key-invalid", id="two quoted keys joined without a space are 400 invalid"),
    case(view('"a", b'), 400, "idempotency-key-invalid", id="a quoted and a bare key joined are 400 invalid"),
    case(view('"a\\x"'), 400, "idempotency-key-invalid", id="a quoted key with an escape sf strings do not have is 400 invalid"),
    # --- the JSON API ---------------------------------------------------------------------
    case(claim("hello"), 400, "invalid-json", id="a claim body that is not json is 400"),
    case(claim('{"key": "a", "operat'), 400, "invalid-json", id="a truncated json claim is 400"),
    case(claim(b'{"key": "\xff\xfe", "operation": "x"}'), 400, "invalid-json", id="a claim body that is not utf 8 is 400"),
    case(claim(""), 400, "invalid-json", id="an empty claim body is 400"),
    case(claim([{"key": "a", "operation": "x"}]), 400, "invalid-json", id="a json array body is 400"),
    case(claim("null"), 400, "invalid-json", id="a json null body is 400"),
    case(claim('{"key": "a", "operation": "x", "request": NaN}'), 400, "invalid-json", id="a NaN in a claim is 400"),
    case(claim('{"key": "a", "operation": "x", "request": ' + "9" * 5000 + "}"), 400, "invalid-json",
         id="a number of 5000 digits is 400"),
    case(claim('{"key": "a", "operation": "x", "request": ' + nested(100_000) + "}"), 400, "invalid-json",
         id="json nested past the parser's recursion limit is 400"),
    case(claim({"key": "a", "operation": "x", "request": json.loads(nested(70))}), 400, "invalid-field", field="body",
         id="a request nested deeper than 64 levels is 400 invalid field"),
    case(claim({"key": "a", "operation": "x"}, content_type="text/plain"), 415, "unsupported-media-type",
         id="a claim sent as text plain is 415"),
    case(claim({"key": "a", "operation": "x"}, content_type=None), 415, "unsupported-media-type",
         id="a claim without a content type is 415"),
    case(claim({"key": "a", "operation": "x"}, content_type="application/x-www-form-urlencoded"), 415,
         "unsupported-media-type", id="a claim sent as a form is 415"),
    case(claim({"operation": "x"}), 400, "invalid-field", field="key", id="a claim without a key is 400 naming key"),
    case(claim({"key": "a"}), 400, "invalid-field", field="operation", id="a claim without an operation is 400"),
    case(claim({"key": "a", "operation": "x", "extra": 1}), 400, "invalid-field", field="extra",
         id="an unknown field is 400 naming it"),
    case(claim({"key": 7, "operation": "x"}), 400, "invalid-field", field="key", id="a key that is a number is 400"),
    case(claim({"key": "a" * 256, "operation": "x"}), 400, "invalid-field", field="key", id="an api key of 256 characters is 400"),
    case(claim({"key": "clé", "operation": "x"}), 400, "invalid-field", field="key", id="an api key with unicode is 400"),
    case(claim({"key": "a\u0000b", "operation": "x"}), 400, "invalid-field", field="key", id="an api key with NUL is 400"),
    case(claim({"key": "a\r\nb", "operation": "x"}), 400, "invalid-field", field="key", id="an api key with CRLF is 400"),
    case(claim({"key": "a", "operation": "pay ment"}), 400, "invalid-field", field="operation",
         id="an operation with a space is 400"),
    case(claim({"key": "a", "operation": "x", "lease_seconds": True}), 400, "invalid-field", field="lease_seconds",
         id="a lease of true is not 1 and is 400"),
    case(claim({"key": "a", "operation": "x", "lease_seconds": 10**12}), 400, "invalid-field", field="lease_seconds",
         id="a huge lease is 400"),
    case(claim({"key": "a", "operation": "x", "lease_seconds": 1.5}), 400, "invalid-field", field="lease_seconds",
         id="a fractional lease is 400"),
    case(claim('{"key": "a", "operation": "x", "wait_seconds": 1e999}'), 400, "invalid-field", field="wait_seconds",
         id="an infinite wait is 400"),
    case(claim({"key": "a", "operation": "x", "wait_seconds": -1}), 400, "invalid-field", field="wait_seconds",
         id="a negative wait is 400"),
    case(claim({"key": "a", "operation": "x", "wait_seconds": "5"}), 400, "invalid-field", field="wait_seconds",
         id="a wait given as a string is 400"),
    case(claim({"key": "a", "operation": "x", "request": {"note": "a\u0000b"}}), 400, "invalid-field", field="request",
         id="a request holding NUL is 400 on every database"),
    case(claim('{"key": "a", "operation": "x", "request": "\\ud800"}'), 400, "invalid-field", field="request",
         id="a request holding a lone surrogate is 400 on every database"),
    case(claim('{"key": "a", "operation": "x", "request": {"\\udc00": 1}}'), 400, "invalid-field", field="request",
         id="a request with a lone surrogate in a name is 400"),
    case(claim(b'{"key": "a", "operation": "x", "request": "\xed\xa0\x80"}'), 400, "invalid-field", field="request",
         id="a request holding the raw bytes of a lone surrogate is 400"),
    case(claim('{"key": "a", "operation": "x", "request": [1e400]}'), 400, "invalid-field", field="request",
         id="a request holding a number beyond a double is 400"),
    case(claim('{"key": "\\ud800", "operation": "x"}'), 400, "invalid-field", field="key", id="a lone surrogate key is 400"),
    case(claim('{"key": "a", "operation": "x", "\\ud800": 1}'), 400, "invalid-field", field="\ud800",
         id="a lone surrogate field name is 400 naming it"),
    case(claim('{"key": "a", "operation": "x", "request": "' + "x" * BIG + '"}'), 413, "payload-too-large",
         id="a claim body over the upload limit is 413"),
    case(claim({"key": "a", "operation": "x"}, auth=None), 401, "unauthorized", id="a claim without a token is 401"),
    case(claim({"key": "a", "operation": "x"}, auth="Bearer idem_wrong"), 401, "unauthorized", id="a claim with a wrong token is 401"),
    case(claim({"key": "a", "operation": "x"}, auth="Bearer a\r\nX-Injected: 1"), 401, "unauthorized",
         id="a token with a CRLF injection is 401"),
    case(claim({"key": "a", "operation": "x"}, method="put"), 405, "method-not-allowed", id="a PUT to claim is 405"),
    case(api("complete", {"key": "a", "token": "1", "response": {}}), 400, "invalid-field", field="token",
         id="a token sent as a string is 400"),
    case(api("complete", {"key": "a", "token": True, "response": {}}), 400, "invalid-field", field="token",
         id="a token of true is 400"),
    case(api("complete", {"key": "a", "token": 2**64, "response": {}}), 400, "invalid-field", field="token",
         id="a token beyond 64 bits is 400"),
    case(api("complete", {"key": "a", "token": 1}), 400, "invalid-field", field="response",
         id="a completion without a response is 400"),
    case(api("complete", {"key": "never-claimed", "token": 1, "response": {}}), 404, "receipt-not-found",
         id="completing a key never claimed is 404"),
    case(api("fail", {"key": "a", "token": 1, "error": "  "}), 400, "invalid-field", field="error",
         id="a failure with a blank error is 400"),
    case(api("fail", {"key": "a", "token": 1, "error": "x", "retryable": "yes"}), 400, "invalid-field", field="retryable",
         id="retryable given as a string is 400"),
    case(api("fail", '{"key": "a", "token": 1, "error": "broke \\ud800"}'), 400, "invalid-field", field="error",
         id="a failure whose error holds a lone surrogate is 400"),
    case(api("complete", '{"key": "a", "token": 1, "response": {"n": "\\ud800"}}'), 400, "invalid-field", field="response",
         id="a completion whose response holds a lone surrogate is 400"),
    case(api("complete", '{"key": "a", "token": 1, "response": 1e400}'), 400, "invalid-field", field="response",
         id="a completion whose response is beyond a double is 400"),
    # --- the outbox API -------------------------------------------------------------------
    case(outbox('{"to": "a@example.com", "subject": "\\ud800", "body": "x"}'), 400, "invalid-field", field="payload",
         id="an outbox payload holding a lone surrogate is 400 naming payload"),
    case(outbox('{"to": "a@example.com", "subject": "s", "body": "x", "\\ud800": 1}'), 400, "invalid-field",
         field="payload", id="an outbox payload with a lone surrogate in a name is 400 naming payload"),
    case(outbox('{"to": "a@example.com", "subject": "a\\u0000b", "body": "x"}'), 400, "invalid-field", field="payload",
         id="an outbox payload holding NUL is 400 on every database"),
    case(outbox('{"to": "a@example.com", "subject": "s", "body": "x", "n": [1e400]}'), 400, "invalid-json",
         id="an outbox payload holding a number beyond a double is 400"),
    case(outbox(nested(70)), 400, "invalid-field", field="body", id="an outbox payload nested deeper than 64 levels is 400"),
    case(outbox(nested(100_000)), 400, "invalid-json", id="an outbox body nested past the parser's recursion limit is 400"),
    case(outbox('{"to": "a@example.com", "subject": "s", "body": "x", "n": NaN}'), 400, "invalid-json",
         id="an outbox payload holding NaN is 400"),
    # --- Stripe ---------------------------------------------------------------------------
    case(stripe(header=""), 400, "webhook-rejected", cause="missing_header", id="stripe without a signature header is rejected"),
    case(stripe(header="garbage"), 400, "webhook-rejected", cause="malformed_header", id="stripe with a malformed header is rejected"),
    case(stripe(header="t=1700000000"), 400, "webhook-rejected", cause="malformed_header", id="stripe without a v1 signature is rejected"),
    case(stripe(secret="whsec_wrong"), 400, "webhook-rejected", cause="no_matching_signature", id="stripe signed with another secret is rejected"),
    case(stripe(skew=-3600), 400, "webhook-rejected", cause="stale_timestamp", id="a stale stripe signature is rejected"),
    case(stripe(skew=3600), 400, "webhook-rejected", cause="future_timestamp", id="a future stripe signature is rejected"),
    case(stripe(stripe_body()[:40], sign=stripe_body()), 400, "webhook-rejected", cause="no_matching_signature",
         id="a truncated stripe body no longer matches its signature"),
    case(stripe(b'{"id": "evt_\xff"}'), 400, "webhook-rejected", cause="invalid_json", id="a signed stripe body that is not utf 8 is rejected"),
    case(stripe(b"not json at all"), 400, "webhook-rejected", cause="invalid_json", id="a signed stripe body that is not json is rejected"),
    case(stripe(b'{"object": "event"}'), 400, "webhook-rejected", cause="missing_id", id="a signed stripe event without an id is rejected"),
    case(stripe(json.dumps({"id": "evt_" + "x" * 600}).encode()), 400, "webhook-rejected", cause="invalid_id",
         id="a stripe event id over 500 characters is rejected"),
    case(stripe(json.dumps({"id": "evt_1\r\nX-Injected: 1"}).encode()), 400, "webhook-rejected", cause="invalid_id",
         id="a stripe event id with CRLF is rejected"),
    case(stripe(b'{"id": "evt_sur", "type": "x.y", "data": {"note": "\\ud800"}}'), 400, "webhook-rejected",
         cause="unstorable_payload", id="a signed stripe event holding a lone surrogate is rejected on every database"),
    case(stripe(b'{"id": "evt_sur", "type": "\\udbff"}'), 400, "webhook-rejected", cause="unstorable_payload",
         id="a signed stripe event whose type is a lone surrogate is rejected"),
    case(stripe(b'{"id": "evt_nan", "type": "x.y", "data": NaN}'), 400, "webhook-rejected", cause="unstorable_payload",
         id="a signed stripe event holding NaN is rejected"),
    case(stripe(b" " * (MIB + 1)), 413, "payload-too-large", cause="body_too_large", id="a stripe body over 1 MiB is 413"),
    case(stripe(b"[" + nested(100_000).encode() + b"]"), 400, "webhook-rejected", cause="invalid_json",
         id="a signed stripe body nested past the recursion limit is rejected"),
    case(stripe(('{"id": "evt_deep", "data": ' + nested(500) + "}").encode()), 400, "webhook-rejected", cause="invalid_json",
         id="a signed stripe body nested 500 deep is rejected before it is stored"),
    # --- Shopify --------------------------------------------------------------------------
    case(shopify(drop=("X-Shopify-Hmac-Sha256",)), 400, "webhook-rejected", cause="missing_header",
         id="shopify without an hmac header is rejected"),
    case(shopify(**{"X-Shopify-Hmac-Sha256": "not base64 at all"}), 400, "webhook-rejected", cause="no_matching_signature",
         id="shopify with a malformed hmac is rejected"),
    case(shopify(secret="shpss_wrong"), 400, "webhook-rejected", cause="no_matching_signature", id="shopify signed with another secret is rejected"),
    case(shopify(b'{"id": 1, "na', sign=b'{"id": 1, "name": "#1001"}'), 400, "webhook-rejected", cause="no_matching_signature",
         id="a truncated shopify body no longer matches its hmac"),
    case(shopify(b'{"id": "\xff"}'), 400, "webhook-rejected", cause="invalid_json", id="a signed shopify body that is not utf 8 is rejected"),
    case(shopify(b"<order/>"), 400, "webhook-rejected", cause="invalid_json", id="a signed shopify body that is not json is rejected"),
    case(shopify(drop=("X-Shopify-Shop-Domain",)), 400, "webhook-rejected", cause="missing_header",
         id="shopify without a shop domain is rejected"),
    case(shopify(drop=("X-Shopify-Webhook-Id",)), 400, "webhook-rejected", cause="missing_header",
         id="shopify without a webhook id is rejected"),
    case(shopify(**{"X-Shopify-Webhook-Id": "w-1\r\nX-Injected: 1"}), 400, "webhook-rejected", cause="invalid_id",
         id="a shopify webhook id with CRLF is rejected"),
    case(shopify(**{"X-Shopify-Shop-Domain": "shop\x00.myshopify.com"}), 400, "webhook-rejected", cause="invalid_id",
         id="a shopify shop domain with NUL is rejected"),
    case(shopify(b'{"id": 1, "note": "\\ud800"}'), 400, "webhook-rejected", cause="unstorable_payload",
         id="a signed shopify order holding a lone surrogate is rejected"),
    case(shopify(b'{"id": 1, "note": "\xed\xa0\x80"}'), 400, "webhook-rejected", cause="unstorable_payload",
         id="a signed shopify order holding the raw bytes of a lone surrogate is rejected"),
    case(shopify(b"null"), 400, "webhook-rejected", cause="invalid_json", id="a signed shopify body of json null is rejected"),
    case(shopify(b" " * (MIB + 1)), 413, "payload-too-large", cause="body_too_large", id="a shopify body over 1 MiB is 413"),
    case(shopify(("[" + nested(900) + "]").encode()), 400, "webhook-rejected", cause="invalid_json",
         id="a signed shopify body nested 900 deep is rejected before it is stored"),
    # --- Standard Webhooks -----------------------------------------------------------------
    case(standard(drop=("webhook-id",)), 400, "webhook-rejected", cause="missing_header", id="standard without webhook id is rejected"),
    case(standard(drop=("webhook-timestamp",)), 400, "webhook-rejected", cause="missing_header",
         id="standard without webhook timestamp is rejected"),
    case(standard(drop=("webhook-signature",)), 400, "webhook-rejected", cause="missing_header",
         id="standard without webhook signature is rejected"),
    case(standard(webhook_timestamp="yesterday"), 400, "webhook-rejected", cause="malformed_header",
         id="a standard timestamp that is not a number is rejected"),
    case(standard(skew=-3600), 400, "webhook-rejected", cause="stale_timestamp", id="a stale standard signature is rejected"),
    case(standard(skew=3600), 400, "webhook-rejected", cause="future_timestamp", id="a future standard signature is rejected"),
    case(standard(secret=OTHER_SECRET), 400, "webhook-rejected", cause="no_matching_signature",
         id="standard signed with another secret is rejected"),
    case(standard(webhook_signature="v1 garbage"), 400, "webhook-rejected", cause="no_matching_signature",
         id="a malformed standard signature list is rejected"),
    case(standard(b'{"type": "\xff"}'), 400, "webhook-rejected", cause="invalid_json", id="a signed standard body that is not utf 8 is rejected"),
    case(standard(b"type=invoice.paid"), 400, "webhook-rejected", cause="invalid_json", id="a signed standard body that is not json is rejected"),
    case(standard(('{"type": "x", "data": ' + nested(65) + "}").encode()), 400, "webhook-rejected", cause="invalid_json",
         id="a signed standard body nested 66 deep is rejected before it is stored"),
    case(standard(msg_id="msg_1\r\nX-Injected: 1"), 400, "webhook-rejected", cause="invalid_id",
         id="a standard webhook id with CRLF is rejected"),
    case(standard(b'{"type": "invoice.paid", "data": {"\\ud800": 1}}'), 400, "webhook-rejected", cause="unstorable_payload",
         id="a signed standard webhook with a lone surrogate in a name is rejected"),
    case(standard(b'{"type": "invoice.paid", "data": {"total": 1e400}}'), 400, "webhook-rejected", cause="unstorable_payload",
         id="a signed standard webhook holding a number beyond a double is rejected"),
    case(standard(b"null"), 400, "webhook-rejected", cause="invalid_json", id="a signed standard body of json null is rejected"),
    case(standard(b" " * (MIB + 1)), 413, "payload-too-large", cause="body_too_large", id="a standard body over 1 MiB is 413"),
    # --- the receiver itself ---------------------------------------------------------------
    case(lambda w: w.client.post("/webhooks/nobody/", b"{}", content_type="application/json"), 404,
         "webhook-endpoint-not-found", id="an unknown webhook slug is 404"),
    case(lambda w: w.client.get("/webhooks/stripe-in/"), 405, "method-not-allowed", id="a GET to a webhook endpoint is 405"),
]


def test_the_corpus_has_at_least_forty_cases():
    assert len(CORPUS) >= 40


@pytest.mark.parametrize("send, status, slug, cause, field", CORPUS)
def test_bad_input_gets_its_documented_4xx_and_stores_nothing_half_way(world, send, status, slug, cause, field):
    before = snapshot()
    response = send(world)
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == f"urn:idemdash:problem:{slug}"
    assert problem["title"] and "detail" in problem and problem["status"] == status
    if field is not None:
        assert problem["field"] == field
    after = snapshot()
    if cause is not None:
        # A rejected webhook delivery is logged once, with its cause; nothing else changes.
        if status == 400:
            assert problem["cause"] == cause
        assert after.pop("RejectedDelivery") == before.pop("RejectedDelivery") + 1
        assert RejectedDelivery.objects.get().cause == cause
    assert after == before


OTHER_KINDS = [kind for kind in VIEW_KINDS if kind != "django"]
VIEW_CORPUS = [
    pytest.param(*case.values, kind, id=f"{kind}: {case.id}")
    for case in CORPUS if getattr(case.values[0], "to_a_view", False)
    for kind in OTHER_KINDS
]


@pytest.mark.parametrize("send, status, slug, cause, field, kind", VIEW_CORPUS)
def test_every_kind_of_view_answers_the_decorators_bad_input_as_a_django_view_does(world, send, status, slug, cause,
                                                                                    field, kind):
    before = snapshot()
    response = send(world, kind)
    assert response.status_code == status, response.content[:500]
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["type"] == f"urn:idemdash:problem:{slug}"
    assert snapshot() == before


# --- odd but valid input: answered normally, never a 500 ---------------------------------

def test_a_garbage_prefer_wait_is_ignored_as_rfc_7240_asks(world):
    for prefer in ("wait=soon", "wait=-5", "wait", 'wait="', "wait=1e3"):
        key = f"prefer-{prefer}-key"  # a bare key may not end with a quote
        response = view(key, Prefer=prefer)(world)
        assert response.status_code == 201, (prefer, response.content)
        assert "Preference-Applied" not in response
    assert AuditEntry.objects.filter(action="faults.view_row").count() == 5


def test_a_key_holding_a_comma_is_taken_when_sent_as_a_quoted_sf_string(world):
    # A bare comma means the header was sent twice; inside an sf-string it is the key's own.
    assert view('"a,b"')(world).status_code == 201
    assert view('"a,b"')(world)["Idempotent-Replayed"] == "true"
    assert view('"say \\"hi\\" \\\\o/"')(world).status_code == 201
    assert sorted(Receipt.objects.values_list("key", flat=True)) == ["a,b", 'say "hi" \\o/']


def test_a_decorated_view_takes_a_body_that_is_not_utf8_and_holds_nul_and_replays_it(world):
    body = b"\xff\x00\xfe binary \x00"
    first = view("bin-1", body)(world)
    again = view("bin-1", body)(world)
    assert first.status_code == 201
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert Receipt.objects.get(key="bin-1").request["body"] == "\ufffd\ufffd\ufffd binary \ufffd"


@pytest.mark.parametrize("depth", [66, 500, 900, 100_000])
def test_a_decorated_view_takes_deeply_nested_json_as_opaque_bytes(world, depth):
    body = nested(depth).encode()
    assert view("deep-1", body)(world).status_code == 201
    assert view("deep-1", body)(world)["Idempotent-Replayed"] == "true"
    assert view("deep-1", nested(depth - 1).encode())(world).status_code == 422
    assert Receipt.objects.get(key="deep-1").request["body"] == body[:4096].decode()


# --- duplicate JSON keys: the last wins, everywhere ----------------------------------------

def test_duplicate_keys_in_a_claim_mean_the_last_value_for_fingerprint_and_stored_request(world):
    first = claim('{"key": "dup-1", "operation": "x", "request": {"amount": 1, "amount": 2}}')(world)
    assert first.status_code == 201
    receipt = Receipt.objects.get(key="dup-1")
    assert receipt.request == {"amount": 2}
    api("complete", {"key": "dup-1", "token": first.json()["token"], "response": {"ok": True}})(world)
    # The request as the caller meant it (the last value) is the same request...
    assert claim({"key": "dup-1", "operation": "x", "request": {"amount": 2}})(world).status_code == 200
    # ...and the first value is another one.
    assert claim({"key": "dup-1", "operation": "x", "request": {"amount": 1}})(world).status_code == 422


def test_a_duplicated_top_level_field_in_a_claim_takes_its_last_value(world):
    response = claim('{"key": "first", "key": "second", "operation": "x"}')(world)
    assert response.status_code == 201
    assert list(Receipt.objects.values_list("key", flat=True)) == ["second"]


def test_duplicate_keys_in_a_decorated_views_body_mean_the_last_value(world):
    assert view("dup-view", b'{"amount": 1, "amount": 2}')(world).status_code == 201
    assert Receipt.objects.get(key="dup-view").request["body"] == {"amount": 2}
    assert view("dup-view", b'{"amount": 2}')(world)["Idempotent-Replayed"] == "true"
    assert view("dup-view", b'{"amount": 1}')(world).status_code == 422


def test_duplicate_keys_in_a_webhook_payload_mean_the_last_value(world):
    body = b'{"id": "evt_dup", "id": "evt_last", "type": "x.y", "data": {"object": {}}}'
    assert stripe(body)(world).status_code == 200
    event = WebhookEvent.objects.get()
    assert (event.dedupe_key, event.payload["id"]) == ("evt_last", "evt_last")
    same = stripe(b'{"type": "x.y", "data": {"object": {}}, "id": "evt_last"}')(world).json()
    assert same["duplicate"] is True and same["payload_matches"] is True


# --- Idempotency-Key: one key per header, a repeated header refused ------------------------

PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
KEYS = st.text(PRINTABLE, min_size=1, max_size=40)


def sf_string(key: str) -> str:
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def as_sent(key: str, quoted: bool) -> str:
    """The header value for `key`: always an sf-string, or as the outbox sends it."""
    return sf_string(key) if quoted else format_key(key)


@hypothesis_settings(max_examples=300, deadline=None)
@given(key=KEYS, quoted=st.booleans())
def test_every_printable_key_is_read_back_from_its_header(key, quoted):
    assert parse_key(as_sent(key, quoted)) == key


@hypothesis_settings(max_examples=300, deadline=None)
@given(first=KEYS, second=KEYS, quoted=st.tuples(st.booleans(), st.booleans()), separator=st.sampled_from([",", ", "]))
def test_a_header_sent_twice_and_joined_is_never_read_as_a_key(first, second, quoted, separator):
    joined = as_sent(first, quoted[0]) + separator + as_sent(second, quoted[1])
    assert parse_key(joined) is None


def test_a_bare_key_with_a_quote_at_either_end_is_refused():
    # Found by the test above: `"` sent twice arrives as `","`, which reads as the key `,`.
    assert [parse_key(v) for v in ('"', '"a', 'a"', '","')] == [None, None, None, ","]
    assert parse_key('a"b') == 'a"b'


def test_only_spaces_and_tabs_around_a_key_are_dropped():
    # Found by test_arbitrary_json.py: `0` and NEL (U+0085, a space to str.strip()) was the key
    # `0` to a sync view and refused by an async one, which reads the same header's bytes as
    # other text. Only HTTP's optional whitespace is dropped; anything else is the key's own.
    assert parse_key(" \tk-1\t ") == "k-1"
    assert [parse_key(v) for v in ("0\x85", "\u20000", "0\u3000", "\x0bk", "k\x0c")] == [None] * 5
