"""Arbitrary JSON, lone surrogates included, to every body parser: never a 5xx, never a row
half written. The outbox API also gets arbitrary headers (method, media type, token, and
others), and each of its refusals must be one of the problems it documents.

Hypothesis builds JSON values whose strings (values and object names) mix any Unicode
with lone UTF-16 surrogates, and sends them as `\\ud800` escapes, as raw UTF-8-encoded
surrogate bytes (Python's parser lets both through), or as arbitrary text that may not be
JSON at all, plus numbers JSON allows but a double cannot hold (`1e400`) and the NaN and
Infinity literals. Each target must answer 2xx or a 4xx problem; on a 4xx its tables are as
before (a rejected webhook adds exactly its one RejectedDelivery row, with its cause), on a
2xx exactly what the request made is stored, whole.
"""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import HealthCheck, event, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from idemdash.core.models import AuditEntry

from receipts.models import Receipt
from receipts.outbox.models import OutboxMessage
from tests.faults.test_bad_input import World, api, claim, shopify, snapshot, standard, stripe, view, world  # noqa: F401
from tests.faults.urls import VIEW_KINDS, VIEW_ROW_ACTION
from webhooks.models import RejectedDelivery, WebhookEvent

pytestmark = [pytest.mark.urls("tests.faults.urls"), pytest.mark.django_db]

SURROGATES = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])
TEXT = st.text(st.one_of(st.characters(), SURROGATES), max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), TEXT)
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4), max_leaves=12
)
ODD_LITERALS = st.sampled_from([b"1e400", b"-1e400", b"NaN", b"Infinity", b'"\\ud800"', b'"\\udfff\\ud800"',
                                b'{"\\ud800": 1}', b'"\xed\xa0\x80"', b'"\\u0000"'])
# A JSON document: escaped (`\ud800`), raw UTF-8 bytes (surrogates as their raw bytes), or
# arbitrary text that is often not JSON at all.
DOCUMENTS = st.one_of(
    VALUES.map(lambda v: json.dumps(v).encode()),
    VALUES.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
    ODD_LITERALS,
)
PROPERTY = hypothesis_settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
_serial = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_serial)}"


def assert_client_error_or_success(response) -> None:
    assert response.status_code < 500, response.content[:300]
    if response.status_code >= 400:
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["status"] == response.status_code


def parsed(doc: bytes) -> object:
    return as_stored(json.loads(doc))


def sent(world, request) -> tuple[dict, object]:
    """The tables as they were, then the response to `request` (a sender already bound to its body)."""
    before = snapshot()
    return before, request(world)


def as_stored(value: object) -> object:
    """Numbers compared as doubles: PostgreSQL's jsonb keeps them as decimals, so it gives
    3.602879701896397e+16 back as the integer 36028797018963970, the same JSON number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, list):
        return [as_stored(item) for item in value]
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items()}
    return value


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_claim_takes_any_request_or_refuses_it_with_a_4xx(world, doc):
    key = unique("claim")
    before, response = sent(world, claim(b'{"key": "%s", "operation": "prop.claim", "request": %s}' % (key.encode(), doc)))
    assert_client_error_or_success(response)
    if response.status_code == 201:
        assert as_stored(Receipt.objects.get(key=key).request) == parsed(doc)
    else:
        assert snapshot() == before


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_claim_takes_any_object_as_its_whole_body_or_refuses_it(world, doc):
    before, response = sent(world, claim(b'{"operation": "prop.name", %s: 1}' % doc))
    assert_client_error_or_success(response)
    assert response.status_code == 400 and snapshot() == before


def settle(w, endpoint: str, field: str, doc: bytes):
    """Claim a fresh key, then settle it through `endpoint` with `doc` as `field`. A 4xx
    must leave every table as it was; returns the response and the receipt."""
    key = unique(endpoint)
    token = claim({"key": key, "operation": f"prop.{endpoint}"})(w).json()["token"]
    body = b'{"key": "%s", "token": %d, "%s": %s}' % (key.encode(), token, field.encode(), doc)
    before, response = sent(w, api(endpoint, body))
    assert_client_error_or_success(response)
    if response.status_code >= 400:
        assert snapshot() == before
    return response, Receipt.objects.get(key=key)


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_failure_takes_any_error_or_refuses_it_and_leaves_the_claim_as_it_was(world, doc):
    response, receipt = settle(world, "fail", "error", doc)
    if response.status_code == 200:
        assert (receipt.status, receipt.error) == ("failed", parsed(doc))
    else:
        assert receipt.status == "processing"


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_completion_takes_any_response_or_refuses_it(world, doc):
    response, receipt = settle(world, "complete", "response", doc)
    if response.status_code == 200:
        assert receipt.status == "completed" and as_stored(response.json()["response"]) == parsed(doc)
    else:
        assert receipt.status == "processing"


@pytest.mark.parametrize("kind", VIEW_KINDS)
@PROPERTY
@given(doc=DOCUMENTS)
def test_a_decorated_view_of_any_kind_runs_once_on_any_body_or_refuses_it_before_running(world, kind, doc):
    key = unique("view")
    before = snapshot()
    response = view(key, doc)(world, kind)  # anonymous: no session, no token
    assert_client_error_or_success(response)
    if response.status_code == 201:
        assert Receipt.objects.get(key=key).status == "completed"
        assert AuditEntry.objects.filter(action=VIEW_ROW_ACTION, object_id=key).count() == 1
        again = view(key, doc)(world, kind)
        assert again["Idempotent-Replayed"] == "true" and again.content == response.content
    else:
        assert response.json()["type"] == "urn:idemdash:problem:invalid-json"
        assert snapshot() == before


def assert_stored_or_rejected(response, before: dict[str, int]) -> None:
    assert_client_error_or_success(response)
    after = snapshot()
    if response.status_code == 200:
        assert response.json()["received"] is True
        assert WebhookEvent.objects.filter(pk=response.json()["event"]).exists()
        assert after["RejectedDelivery"] == before["RejectedDelivery"]
    else:
        cause = response.json()["cause"]
        assert cause in {"invalid_json", "missing_id", "unstorable_payload"}
        assert RejectedDelivery.objects.order_by("-id").first().cause == cause
        assert after.pop("RejectedDelivery") == before.pop("RejectedDelivery") + 1
        assert after == before


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_signed_stripe_delivery_of_any_data_is_stored_or_rejected_with_its_cause(world, doc):
    event_id = unique("evt")
    before, response = sent(world, stripe(b'{"id": "%s", "type": "prop.event", "data": %s}' % (event_id.encode(), doc)))
    assert_stored_or_rejected(response, before)


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_signed_shopify_delivery_of_any_body_is_stored_or_rejected_with_its_cause(world, doc):
    before, response = sent(world, shopify(doc, **{"X-Shopify-Webhook-Id": unique("shopify")}))
    assert_stored_or_rejected(response, before)


@PROPERTY
@given(doc=DOCUMENTS)
def test_a_signed_standard_webhook_of_any_body_is_stored_or_rejected_with_its_cause(world, doc):
    before, response = sent(world, standard(doc, msg_id=unique("msg")))
    assert_stored_or_rejected(response, before)


# --- the outbox API -----------------------------------------------------------------------

# Every problem the outbox API may answer, with its status, as its documentation lists them.
OUTBOX_PROBLEMS = {
    "invalid-json": 400,
    "invalid-field": 400,
    "unauthorized": 401,
    "method-not-allowed": 405,
    "length-required": 411,  # a chunked body where the server leaves the chunking on (the middleware's)
    "payload-too-large": 413,
    "unsupported-media-type": 415,
    "invalid-message": 422,
    "idempotency-key-reused": 422,
}
EMAIL = b'"action": "email.send", "payload": {"to": "a@example.com", "subject": "s", "body": "b", "data": %s}'


def enqueue(w: World, body: bytes, *, method: str = "POST", **headers: str):
    headers.setdefault("Authorization", f"Bearer {w.token}")
    content_type = headers.pop("Content-Type", "application/json")
    return w.client.generic(method, "/api/v1/outbox", body, content_type=content_type, headers=headers)


def strings(value: object):
    """Every string in parsed JSON, object names included."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif isinstance(value, dict):
        for name, item in value.items():
            yield name
            yield from strings(item)


def assert_enqueued_or_refused(response, body: bytes, before: dict[str, int]) -> OutboxMessage | None:
    """A 201 (or a 200: the same message again) with the message the body describes, stored
    whole; or a documented problem that wrote nothing."""
    event(f"outbox answered {response.status_code}")  # see them with --hypothesis-show-statistics
    assert_client_error_or_success(response)
    if response.status_code in (200, 201):
        message = OutboxMessage.objects.get(pk=response.json()["id"])
        sent = json.loads(body)
        assert (message.scope, message.key, message.action) == ("client:fault-corpus", sent["key"], sent["action"])
        assert as_stored(message.payload) == as_stored(sent.get("payload", {}))
        # Nothing that one of the databases refuses got in, on SQLite either.
        for text in strings(message.payload):
            assert "\x00" not in text
            text.encode()  # raises on a lone surrogate
        return message
    slug = response.json()["type"].removeprefix("urn:idemdash:problem:")
    assert OUTBOX_PROBLEMS.get(slug) == response.status_code, response.content[:300]
    assert snapshot() == before
    return None


@PROPERTY
@given(doc=DOCUMENTS)
def test_an_outbox_message_takes_any_json_in_its_payload_or_refuses_it(world, doc):
    before = snapshot()
    body = b'{"key": "%s", %s}' % (unique("out").encode(), EMAIL % doc)
    message = assert_enqueued_or_refused(enqueue(world, body), body, before)
    if message is not None:
        assert as_stored(message.payload["data"]) == parsed(doc)


@PROPERTY
@given(doc=DOCUMENTS)
def test_an_outbox_message_takes_any_json_as_its_payload_key_action_or_body_or_refuses_it(world, doc):
    for body in (
        b'{"key": "%s", "action": "email.send", "payload": %s}' % (unique("out").encode(), doc),
        b'{"key": %s, %s}' % (doc, EMAIL % b"1"),
        b'{"key": "%s", "action": %s, "payload": {}}' % (unique("out").encode(), doc),
        doc,
    ):
        before = snapshot()
        assert_enqueued_or_refused(enqueue(world, body), body, before)


# Each with the value that passes as one choice of its own, so that a good share of the
# examples gets past the header checks to the body.
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=40)
METHODS = st.one_of(st.just("POST"), st.sampled_from(["GET", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]))
CONTENT_TYPES = st.one_of(
    st.just("application/json"),
    st.sampled_from(["application/json; charset=utf-8", "application/problem+json", "APPLICATION/JSON", "text/json",
                     "application/x-json", "text/plain", "multipart/form-data; boundary=x",
                     "application/x-www-form-urlencoded", ""]),
    HEADER_TEXT,
)
AUTHORIZATIONS = st.one_of(
    st.just("token"),
    st.sampled_from(["bearer-lowercase", "Bearer idem_wrong", "Basic dXNlcjpwYXNz", "Bearer ", ""]),
    HEADER_TEXT,
)
OTHER_HEADERS = st.dictionaries(
    st.sampled_from(["Idempotency-Key", "Accept", "Prefer", "Content-Encoding", "Transfer-Encoding", "X-Anything"]),
    HEADER_TEXT,
    max_size=3,
)


@PROPERTY
@given(
    method=METHODS,
    content_type=CONTENT_TYPES,
    authorization=AUTHORIZATIONS,
    others=OTHER_HEADERS,
    doc=DOCUMENTS,
)
def test_an_outbox_message_with_any_headers_is_enqueued_or_refused(world, method, content_type, authorization, others,
                                                                    doc):
    token = {"token": f"Bearer {world.token}", "bearer-lowercase": f"bearer {world.token}"}.get(authorization, authorization)
    before = snapshot()
    body = b'{"key": "%s", %s}' % (unique("out").encode(), EMAIL % doc)
    response = enqueue(world, body, method=method, **{**others, "Content-Type": content_type, "Authorization": token})
    if method == "HEAD":  # the same answer without its body
        assert response.status_code == 405 and snapshot() == before
        return
    if assert_enqueued_or_refused(response, body, before) is not None:
        assert method == "POST"


# --- every kind of view: the same answer to the same hostile request ------------------------

# Django's AsyncClient sends the content type as ASCII (a limit of the test client, not of ASGI).
ASCII_CONTENT_TYPES = CONTENT_TYPES.filter(str.isascii)
KEY_TEXT = st.one_of(st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12), HEADER_TEXT)


# Five requests an example: fewer examples than the single-target properties.
@hypothesis_settings(PROPERTY, max_examples=25)
@given(key=KEY_TEXT, prefer=HEADER_TEXT, authorization=HEADER_TEXT, content_type=ASCII_CONTENT_TYPES,
       doc=DOCUMENTS)
@example(key="0\x85", prefer="", authorization="", content_type="application/json", doc=b"")  # NEL: a space to str.strip()
def test_any_key_headers_and_body_get_the_same_answer_from_every_kind_of_view(world, key, prefer, authorization,
                                                                              content_type, doc):
    answers = {}
    for kind in VIEW_KINDS:
        before = snapshot()
        response = view(key, doc, Prefer=prefer, Authorization=authorization, **{"Content-Type": content_type})(world, kind)
        assert_client_error_or_success(response)
        answers[kind] = (response.status_code, response.json().get("type") if response.status_code >= 400 else None)
        if response.status_code >= 400:
            assert snapshot() == before
        Receipt.objects.all().delete()  # so that the next kind answers it as a first attempt too
    event(f"views answered {answers['django']}")
    assert len(set(answers.values())) == 1, answers
