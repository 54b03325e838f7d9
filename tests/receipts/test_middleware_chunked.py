"""receipts.middleware.ChunkedBodyMiddleware: chunked request bodies, against real servers: gunicorn, which takes
the chunking off (`wsgi.input_terminated`), and Django's own server, which does not. Also a
header sent twice, which only a real server joins. Both databases: gunicorn reaches the
test database by URL."""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

import pytest

from idemdash.core.clients import create_token
from idemdash.core.models import AuditEntry
from receipts.models import Receipt
from tests.gunicorn import Gunicorn
from tests.webhooks.conftest import STRIPE_SECRET, make_endpoint, stripe_event, stripe_headers
from webhooks.models import RejectedDelivery, WebhookEvent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

UPLOAD_LIMIT = 2_621_440  # Django's DATA_UPLOAD_MAX_MEMORY_SIZE
WEBHOOK_LIMIT = 1024 * 1024  # WEBHOOKS_MAX_BODY_BYTES
CHUNK = 16 * 1024


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        server = Gunicorn(tmp_path_factory.mktemp("gunicorn") / "gunicorn.log", "tests.faults.server_settings")
    yield server
    server.stop()


def send(base_url: str, path: str, body: bytes, headers: dict[str, str] | list[tuple[str, str]], *,
         chunked: bool = True) -> tuple[int, dict[str, str], bytes]:
    """POST `body`, chunked (in CHUNK-byte chunks) or with a Content-Length, written in one
    sendall: a server that answers before reading the body (the 411) must not meet a
    client still writing. `headers` as a list may name a header twice."""
    url = urlsplit(base_url)
    lines = [f"POST {path} HTTP/1.1", f"Host: {url.netloc}", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers.items() if isinstance(headers, dict) else headers)]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        parts = (body[start : start + CHUNK] for start in range(0, len(body), CHUNK))
        body = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()


def capture(base_url: str, key: str, body: bytes, *, chunked: bool = True):
    return send(base_url, "/capture/", body, {"Idempotency-Key": key, "Content-Type": "application/json"},
                chunked=chunked)


def problem_type(raw: bytes) -> str:
    return json.loads(raw)["type"].removeprefix("urn:idemdash:problem:")


@pytest.mark.slow
def test_a_chunked_body_reaches_a_decorated_view_and_is_fingerprinted_as_sent(gunicorn):
    body = json.dumps({"amount": 100, "note": "x" * 40_000}).encode()  # several chunks
    status, _, raw = capture(gunicorn.url, "chunked-1", body)
    assert status == 201, raw[:300]
    assert Receipt.objects.get(key="chunked-1").request["body"] == json.loads(body)
    # The same body with a Content-Length is the same request; another body is not.
    status, headers, _ = capture(gunicorn.url, "chunked-1", body, chunked=False)
    assert (status, headers.get("idempotent-replayed")) == (201, "true")
    assert capture(gunicorn.url, "chunked-1", b'{"amount": 100}')[0] == 422
    assert AuditEntry.objects.filter(object_id="chunked-1").count() == 1


@pytest.mark.slow
def test_a_chunked_claim_is_read_whole(gunicorn):
    token = create_token("chunked")[1]
    body = json.dumps({"key": "chunked-claim", "operation": "x", "request": {"n": "y" * 30_000}}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, _, raw = send(gunicorn.url, "/api/v1/receipts/claim", body, headers)
    assert status == 201, raw[:300]
    assert Receipt.objects.get(key="chunked-claim").request == {"n": "y" * 30_000}


@pytest.mark.slow
def test_a_validly_signed_chunked_stripe_delivery_is_stored(gunicorn):
    make_endpoint("stripe-chunked", "stripe", STRIPE_SECRET)
    body = json.dumps(stripe_event({"id": "pi_1", "pad": "z" * 50_000}, "payment_intent.succeeded")).encode()
    headers = {**stripe_headers(body, STRIPE_SECRET), "Content-Type": "application/json"}
    status, _, raw = send(gunicorn.url, "/webhooks/stripe-chunked/", body, headers)
    assert status == 200, raw[:300]
    assert WebhookEvent.objects.get().payload == json.loads(body)
    assert not RejectedDelivery.objects.exists()


@pytest.mark.slow
def test_a_chunked_body_over_the_upload_limit_is_413_before_anything_runs(gunicorn):
    status, _, raw = capture(gunicorn.url, "chunked-big", b" " * (UPLOAD_LIMIT + 1))
    assert (status, problem_type(raw)) == (413, "payload-too-large")
    token = create_token("chunked-big")[1]
    body = b'{"key": "a", "operation": "x", "request": "' + b"x" * UPLOAD_LIMIT + b'"}'
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, _, raw = send(gunicorn.url, "/api/v1/receipts/claim", body, headers)
    assert (status, problem_type(raw)) == (413, "payload-too-large")
    assert not Receipt.objects.exists() and not AuditEntry.objects.filter(object_id="chunked-big").exists()


@pytest.mark.slow
def test_a_chunked_delivery_over_the_webhook_limit_is_413_and_recorded(gunicorn):
    make_endpoint("stripe-chunked", "stripe", STRIPE_SECRET)
    body = b" " * (WEBHOOK_LIMIT + 1)
    status, _, raw = send(gunicorn.url, "/webhooks/stripe-chunked/", body, stripe_headers(body, STRIPE_SECRET))
    assert (status, problem_type(raw)) == (413, "payload-too-large")
    rejected = RejectedDelivery.objects.get()
    assert (rejected.cause, rejected.body_size) == ("body_too_large", WEBHOOK_LIMIT + 1)
    assert not WebhookEvent.objects.exists()


@pytest.mark.slow
@pytest.mark.parametrize("values", [("k-1", "k-2"), ("k-1", "k-1"), ('"k-1"', '"k-2"')])
def test_an_idempotency_key_header_sent_twice_is_400_invalid(gunicorn, values):
    headers = [("Content-Type", "application/json"), *(("Idempotency-Key", value) for value in values)]
    status, _, raw = send(gunicorn.url, "/capture/", b'{"amount": 1}', headers, chunked=False)
    assert (status, problem_type(raw)) == (400, "idempotency-key-invalid")
    assert not Receipt.objects.exists() and not AuditEntry.objects.exists()


def test_a_server_that_leaves_the_chunking_on_answers_411_and_runs_nothing(live_server):
    token = create_token("chunked-411")[1]
    body = json.dumps({"key": "never", "operation": "x"}).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    status, _, raw = send(live_server.url, "/api/v1/receipts/claim", body, headers)
    assert (status, problem_type(raw)) == (411, "length-required")
    assert not Receipt.objects.exists()


class Endless:
    """A de-chunked input that never ends, counting what was read from it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def read(self, size: int = -1) -> bytes:
        assert 0 < size <= 1024 * 1024, "read in bounded steps"
        self.read_bytes += size
        return b"x" * size

    def readline(self, size: int = -1) -> bytes:  # WSGIRequest wraps it; never called here
        raise AssertionError("the middleware reads in steps, not lines")


def test_an_endless_chunked_body_is_read_only_one_byte_past_the_limit(rf, settings):
    from receipts.middleware import ChunkedBodyMiddleware

    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    settings.WEBHOOKS_MAX_BODY_BYTES = 50_000
    stream = Endless()
    request = rf.post("/capture/", HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="",
                      **{"wsgi.input": stream, "wsgi.input_terminated": True})
    seen = ChunkedBodyMiddleware(lambda r: r.META["CONTENT_LENGTH"])(request)
    assert seen == "100001" and stream.read_bytes == 100_001
