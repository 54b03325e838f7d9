"""The hostile-input suite, over the wire: what only a real server sees. Request lines and
header forms gunicorn refuses before Django (docs/http-contract.md, "Requests the server
refuses"), and broken chunked framing on every POST path, sent over a raw socket to
gunicorn started as the Procfile and docs/operations.md start it (the
`idemdash.serving.ProblemThreadWorker` worker class, gthread, gunicorn's default limits).

Each answer: the documented status, `application/problem+json` with its type, no row
written, and no ERROR line (no traceback) in the server's log. The tables of the Django
test-client half are in tests/faults/test_hostile.py; test_the_hostile_suite_counts_at_least_450_inputs
there counts both.
"""

from __future__ import annotations

import json
import socket

import pytest

from idemdash.core.clients import create_token
from tests.faults.test_bad_input import snapshot
from tests.gunicorn import Gunicorn
from tests.webhooks.conftest import STRIPE_SECRET, make_endpoint

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

WORKER_CLASS = "idemdash.serving.ProblemThreadWorker"


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        gunicorn = Gunicorn(tmp_path_factory.mktemp("hostile") / "gunicorn.log", "tests.faults.server_settings",
                            worker_class=WORKER_CLASS, threads=2)
    yield gunicorn
    gunicorn.stop()


@pytest.fixture
def token(server, settings) -> str:
    make_endpoint("stripe-in", "stripe", STRIPE_SECRET)
    return create_token("wire")[1]


def exchange(server: Gunicorn, data: bytes, *, half_close: bool = False) -> tuple[int, dict[str, str], bytes]:
    """Send `data` as is, read the first response (status, headers, body by Content-Length or chunks)."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        raw = b""
        while b"\r\n\r\n" not in raw:
            part = sock.recv(65536)
            if not part:
                break
            raw += part
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        if "content-length" in headers:
            while len(rest) < int(headers["content-length"]):
                part = sock.recv(65536)
                if not part:
                    break
                rest += part
            return status, headers, rest[: int(headers["content-length"])]
        while not rest.endswith(b"0\r\n\r\n"):  # chunked: read to the last chunk
            part = sock.recv(65536)
            if not part:
                break
            rest += part
        body, data = b"", rest
        while data:
            size, _, data = data.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            body, data = body + data[:n], data[n + 2:]
        return status, headers, body


def log_size(server: Gunicorn) -> int:
    return server.log_path.stat().st_size


def assert_no_error_logged(server: Gunicorn, since: int) -> None:
    """Nothing logged at ERROR since byte `since` of the log (the start-up probe's page may
    be a 500 in these settings: no collected static files)."""
    with open(server.log_path, "rb") as f:
        f.seek(since)
        log = f.read().decode(errors="replace")
    assert " ERROR " not in log and "[ERROR]" not in log and "Traceback" not in log, log[-3000:]


def request(head: str, body: bytes = b"") -> bytes:
    return head.replace("\n", "\r\n").encode("latin-1") + b"\r\n" + body


# --- what gunicorn refuses before Django ---------------------------------------------------

GET = "GET /accounts/login/ HTTP/1.1\nHost: 127.0.0.1\n"
LONG = "x" * 5000
HEADER_FORMS = [
    pytest.param(request(GET + "Bad Header: 1\n"), 400, "malformed-request", id="a header name with a space"),
    pytest.param(request(GET + "X-Foo\x00: 1\n"), 400, "malformed-request", id="a header name with NUL"),
    pytest.param(request(GET + ": no-name\n"), 400, "malformed-request", id="an empty header name"),
    pytest.param(request(GET + "NoColonHere\n"), 400, "malformed-request", id="a header line without a colon"),
    pytest.param(request(GET + "X(A): 1\n"), 400, "malformed-request", id="a header name with a parenthesis"),
    pytest.param(request(GET + "X\u00e9: 1\n"), 400, "malformed-request", id="a header name with a non ascii letter"),
    pytest.param(request(GET + "X-A: 1\n continued\n"), 400, "malformed-request", id="obsolete line folding"),
    pytest.param(request(GET + "X-A: a\x00b\n"), 400, "malformed-request", id="a NUL in a header value"),
    pytest.param(request(GET + "X-A: a\rb\n"), 400, "malformed-request", id="a bare CR in a header value"),
    pytest.param(b"GET /accounts/login/ HTTP/1.1\nHost: 127.0.0.1\n\n", 400, "malformed-request", id="bare LF line ends"),
    pytest.param(request("G(T / HTTP/1.1\nHost: 127.0.0.1\n"), 400, "malformed-request", id="an invalid method"),
    pytest.param(request("GET / HTTP/9.9\nHost: 127.0.0.1\n"), 400, "malformed-request", id="an unknown HTTP version"),
    pytest.param(request("GET / HTTX/1.1\nHost: 127.0.0.1\n"), 400, "malformed-request", id="a protocol that is not HTTP"),
    pytest.param(request("HELLO\nHost: 127.0.0.1\n"), 400, "malformed-request", id="a request line of one word"),
    pytest.param(request("GET  /  HTTP/1.1\nHost: 127.0.0.1\n"), 400, "malformed-request", id="a request line with double spaces"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 2\nTransfer-Encoding: chunked\n",
                         b"0\r\n\r\n"), 400, "malformed-request", id="content length and transfer encoding together"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nContent-Length: 2\nContent-Length: 3\n", b"{}"),
                 400, "malformed-request", id="two content lengths"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nContent-Length: two\n", b"{}"),
                 400, "malformed-request", id="a content length that is not a number"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nContent-Length: -1\n", b"{}"),
                 400, "malformed-request", id="a negative content length"),
    pytest.param(request(f"GET /?q={LONG} HTTP/1.1\nHost: 127.0.0.1\n"), 414, "uri-too-long", id="a request line over 4094 bytes"),
    pytest.param(request(f"GET /{LONG} HTTP/1.1\nHost: 127.0.0.1\n"), 414, "uri-too-long", id="a path over 4094 bytes"),
    pytest.param(request(GET + "".join(f"X-H{i}: {i}\n" for i in range(101))), 431, "header-fields-too-large",
                 id="101 headers"),
    pytest.param(request(GET + "X-Big: " + "y" * 9000 + "\n"), 431, "header-fields-too-large",
                 id="a header over 8190 bytes"),
    pytest.param(request(GET + "Cookie: " + "c=" + "z" * 9000 + "\n"), 431, "header-fields-too-large",
                 id="a cookie over 8190 bytes"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nTransfer-Encoding: gzip\n", b"x"),
                 400, "malformed-request", id="a transfer coding that does not end with chunked"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nTransfer-Encoding: chunked, chunked\n",
                         b"0\r\n\r\n"), 400, "malformed-request", id="chunked twice"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.0\nHost: 127.0.0.1\nTransfer-Encoding: chunked\n",
                         b"0\r\n\r\n"), 400, "malformed-request", id="chunked in HTTP 1.0"),
    pytest.param(request("POST /api/v1/outbox HTTP/1.1\nHost: 127.0.0.1\nTransfer-Encoding: br, chunked\n",
                         b"0\r\n\r\n"), 501, "not-implemented", id="a transfer coding gunicorn does not know"),
]


def each_case(cases: list, check) -> None:
    """check(*case) for every case of a table, in one test: a test's cost here is mostly the
    database flush after it (one per test with transaction=True), not the exchange. Every case
    runs; the failures are listed together, each under its id."""
    failed = []
    for case in cases:
        try:
            check(*case.values)
        except (AssertionError, ValueError, KeyError) as exc:
            failed.append(f"{case.id}: {type(exc).__name__}: {exc}"[:1500])
    assert not failed, f"{len(failed)} of {len(cases)} cases:\n" + "\n".join(failed)


def test_every_request_gunicorn_refuses_is_answered_as_problem_json(server):
    def check(data: bytes, status: int, slug: str) -> None:
        before, since = snapshot(), log_size(server)
        got, headers, body = exchange(server, data)
        assert got == status, body[:300]
        assert headers["content-type"] == "application/problem+json"
        problem = json.loads(body)
        assert problem["type"] == f"urn:idemdash:problem:{slug}" and problem["status"] == status
        assert snapshot() == before
        assert_no_error_logged(server, since)

    each_case(HEADER_FORMS, check)


# --- broken chunked framing, on every POST path ---------------------------------------------

POST_PATHS = [
    "/api/v1/receipts/claim", "/api/v1/receipts/complete", "/api/v1/receipts/fail", "/api/v1/outbox",
    "/webhooks/stripe-in/", "/webhooks/stripe-in", "/capture/", "/accounts/login/",
]
FRAMINGS = {
    "a chunk size that is not hex": (b"zz\r\nabc\r\n0\r\n\r\n", False),
    "a chunk without its CRLF": (b"3\r\nabcXY0\r\n\r\n", False),
    "a chunk size with a bad extension": (b"3;\x00\r\nabc\r\n0\r\n\r\n", False),
    "a chunk longer than its size": (b"2\r\nabcdef\r\n0\r\n\r\n", False),
    "a body that stops mid chunk": (b"10\r\nabc", True),
}
FRAMING_CASES = [
    pytest.param(path, body, half_close, id=f"{name} to {path}")
    for path in POST_PATHS for name, (body, half_close) in FRAMINGS.items()
]


def test_broken_chunked_framing_on_every_post_path_is_400_malformed_body_and_writes_nothing(server, token):
    def check(path: str, body: bytes, half_close: bool) -> None:
        before, since = snapshot(), log_size(server)
        head = (f"POST {path} HTTP/1.1\nHost: 127.0.0.1\nContent-Type: application/json\n"
                f"Authorization: Bearer {token}\nIdempotency-Key: wire-1\nStripe-Signature: t=1,v1=00\n"
                "Transfer-Encoding: chunked\n")
        status, headers, raw = exchange(server, request(head, body), half_close=half_close)
        assert status == 400, raw[:300]
        assert headers["content-type"] == "application/problem+json"
        assert json.loads(raw)["type"] == "urn:idemdash:problem:malformed-body"
        assert snapshot() == before
        assert_no_error_logged(server, since)

    each_case(FRAMING_CASES, check)


WIRE_CASES = len(HEADER_FORMS) + len(FRAMING_CASES)


def test_under_plain_gthread_the_refusals_are_gunicorns_own_html_as_documented(django_db_blocker, tmp_path):
    with django_db_blocker.unblock():
        plain = Gunicorn(tmp_path / "gunicorn.log", "tests.faults.server_settings", worker_class="gthread", threads=2)
    try:
        status, headers, body = exchange(plain, request(GET + "Bad Header: 1\n"))
    finally:
        plain.stop()
    assert (status, headers["content-type"]) == (400, "text/html")
    assert b"Invalid HTTP header name" in body
