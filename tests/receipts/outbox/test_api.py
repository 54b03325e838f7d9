from __future__ import annotations

import json

import pytest

from idemdash.core.clients import create_token
from idemdash.core.canonical import json_depth_limit, nesting_depth
from receipts.outbox.models import OutboxMessage

pytestmark = pytest.mark.django_db

URL = "/api/v1/outbox"
MESSAGE = {"key": "order-42-receipt", "action": "http.post", "payload": {"url": "https://example.com/hook", "json": {"order": 42}}}


@pytest.fixture
def token() -> str:
    return create_token("shop")[1]


def post(client, body, token: str | None, content_type: str = "application/json"):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return client.post(URL, data=data, content_type=content_type, **headers)


def assert_problem(response, status: int, slug: str) -> dict:
    assert response.status_code == status
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == f"urn:idemdash:problem:{slug}" and body["title"]
    return body


def test_a_new_message_is_created_with_201_in_the_clients_scope(client, token):
    response = post(client, MESSAGE, token)
    assert response.status_code == 201
    assert response.json()["status"] == "pending" and response.json()["key"] == "order-42-receipt"
    m = OutboxMessage.objects.get()
    assert (m.scope, m.action, m.payload) == ("client:shop", "http.post", MESSAGE["payload"])


def test_the_same_message_again_is_200_and_adds_nothing(client, token):
    first = post(client, MESSAGE, token).json()
    again = post(client, MESSAGE, token)
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    assert OutboxMessage.objects.count() == 1


def test_the_same_key_for_another_message_is_422(client, token):
    post(client, MESSAGE, token)
    other = {**MESSAGE, "payload": {**MESSAGE["payload"], "json": {"order": 43}}}
    assert_problem(post(client, other, token), 422, "idempotency-key-reused")


def test_another_client_may_use_the_same_key(client, token):
    post(client, MESSAGE, token)
    assert post(client, MESSAGE, create_token("crm")[1]).status_code == 201


def test_it_requires_a_bearer_token(client):
    response = post(client, MESSAGE, None)
    assert_problem(response, 401, "unauthorized")
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert_problem(post(client, MESSAGE, "idem_wrong"), 401, "unauthorized")
    assert not OutboxMessage.objects.exists()


@pytest.mark.parametrize(
    "body,status,slug",
    [
        ("{not json", 400, "invalid-json"),
        ([1, 2], 400, "invalid-json"),
        ({**MESSAGE, "key": ""}, 422, "invalid-message"),
        ({**MESSAGE, "key": None}, 422, "invalid-message"),
        ({**MESSAGE, "action": "rm.rf"}, 422, "invalid-message"),
        ({**MESSAGE, "action": 7}, 422, "invalid-message"),
        ({**MESSAGE, "payload": {"url": "file:///etc/passwd"}}, 422, "invalid-message"),
        ({**MESSAGE, "payload": "text"}, 422, "invalid-message"),
    ],
)
def test_bad_input_is_a_problem_and_writes_nothing(client, token, body, status, slug):
    assert_problem(post(client, body, token), status, slug)
    assert not OutboxMessage.objects.exists()


def test_it_accepts_only_json(client, token):
    assert_problem(post(client, "key=a", token, content_type="application/x-www-form-urlencoded"), 415, "unsupported-media-type")


def test_it_accepts_only_post(client, token):
    response = client.get(URL, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert_problem(response, 405, "method-not-allowed")
    assert response["Allow"] == "POST"


def test_a_body_over_the_upload_limit_is_413(client, token, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    big = {**MESSAGE, "payload": {"url": "https://example.com/", "json": "x" * 200}}
    assert_problem(post(client, big, token), 413, "payload-too-large")


# --- the JSON front door, as for the receipts API ------------------------------------------

def with_json(raw: str) -> str:
    """MESSAGE with `raw` (JSON text, sent as it is) as its http.post payload's `json`."""
    return '{"key": "k-raw", "action": "http.post", "payload": {"url": "https://example.com/hook", "json": %s}}' % raw


def nested(depth: int) -> str:
    """A JSON array `depth` deep: nesting_depth counts `[1]` as 1."""
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("content_type", ["text/plain", "text/json", "application/x-json", "application/jsonl", ""])
def test_a_body_not_sent_as_json_or_a_plus_json_type_is_415(client, token, content_type):
    assert_problem(post(client, MESSAGE, token, content_type=content_type), 415, "unsupported-media-type")
    assert not OutboxMessage.objects.exists()


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", "application/vnd.shop+json"])
def test_json_with_parameters_any_case_or_a_plus_json_type_is_taken(client, token, content_type):
    assert post(client, MESSAGE, token, content_type=content_type).status_code == 201


def test_a_body_nested_as_deep_as_the_database_stores_is_taken(client, token):
    # 64 levels; 31 on MariaDB, whose JSON columns refuse deeper (canonical.json_depth_limit).
    raw = with_json(nested(json_depth_limit() - 2))
    assert nesting_depth(json.loads(raw)) == json_depth_limit()
    assert post(client, raw, token).status_code == 201


# 300, not 900: Python 3.11's JSON parser counts against the interpreter's recursion limit
# (1000), and under pytest-xdist the view already runs some hundred frames deep, so 900 levels
# were past the parser there (the next test's invalid-json) though not at the top level.
@pytest.mark.parametrize("depth", [-1, 300])
def test_a_body_nested_deeper_than_the_limit_is_400_and_writes_nothing(client, token, depth):
    raw = with_json(nested(depth if depth > 0 else json_depth_limit() + depth))
    assert nesting_depth(json.loads(raw)) > json_depth_limit()
    body = assert_problem(post(client, raw, token), 400, "invalid-field")
    assert body["field"] == "body"
    assert not OutboxMessage.objects.exists()


def test_a_body_nested_past_the_parsers_limit_is_400_not_a_500(client, token):
    assert_problem(post(client, with_json(nested(100_000)), token), 400, "invalid-json")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json_anywhere_in_the_body(client, token, literal):
    assert_problem(post(client, with_json(literal), token), 400, "invalid-json")
    other_field = '{"key": "k-1", "action": "http.post", "payload": {"url": "https://example.com/"}, "note": %s}' % literal
    assert_problem(post(client, other_field, token), 400, "invalid-json")
    assert not OutboxMessage.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [
        '"a\\u0000b"',  # U+0000: PostgreSQL's jsonb cannot hold it; refused on SQLite too
        '{"a\\u0000": 1}',
        '"\\ud800"',  # a lone surrogate, escaped
        '["ok", "\\udfff\\ud800"]',
        '{"\\udc00": 1}',
    ],
)
def test_text_no_database_stores_in_the_payload_is_400_naming_it(client, token, raw):
    body = assert_problem(post(client, with_json(raw), token), 400, "invalid-field")
    assert body["field"] == "payload"
    assert not OutboxMessage.objects.exists()


def test_the_raw_bytes_of_a_lone_surrogate_are_refused_like_its_escape(client, token):
    raw = with_json('"x"').encode().replace(b'"x"', b'"\xed\xa0\x80"')
    body = assert_problem(post(client, raw, token), 400, "invalid-field")
    assert body["field"] == "payload"
    assert not OutboxMessage.objects.exists()


def test_a_pair_of_surrogates_is_one_character_and_is_taken(client, token):
    assert post(client, with_json('"\\ud83d\\ude00"'), token).status_code == 201
    assert OutboxMessage.objects.get().payload["json"] == "\U0001f600"


def test_references_given_with_a_new_message_are_stored_and_shown(client, token):
    references = [{"kind": "order", "value": "42"}, {"kind": "shopify.order", "value": "gid://shopify/Order/42"}]
    response = post(client, {**MESSAGE, "references": references}, token)
    assert response.status_code == 201 and response.json()["references"] == references
    message = OutboxMessage.objects.get()
    assert list(message.references.order_by("pk").values_list("kind", "value")) == [
        ("order", "42"), ("shopify.order", "gid://shopify/Order/42"),
    ]
    assert message.cause_kind == "" and message.cause_id is None  # an API client runs under no claim here


@pytest.mark.parametrize("references", [{"kind": "order"}, [{"kind": "order", "value": " 42"}], [{"kind": "", "value": "42"}]])
def test_bad_references_are_400_and_write_no_message(client, token, references):
    body = assert_problem(post(client, {**MESSAGE, "references": references}, token), 400, "invalid-field")
    assert body["field"] == "references"
    assert not OutboxMessage.objects.exists()
