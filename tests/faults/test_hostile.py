"""The hostile-input suite (issue 19): every entry point, data-driven, through Django's test
client. Tables of inputs per entry point: the Idempotency-Key header on a decorated view,
the JSON API's receipts endpoints field by field, the outbox API with payloads its actions
could never send, the webhook receiver for each provider signed and unsigned (with and
without the trailing slash), the dashboard's and the admin's GET parameters (NUL included),
and the login form.

Each input gets a 4xx problem (or, for a browser page, its documented page: the filter form
again, the admin's `?e=1` redirect, Django's 400 page for a NUL), never a 5xx; no ERROR is
logged; and the tables are as before (a rejected webhook adds its one RejectedDelivery row,
an accepted one its event, whole). tests/faults/test_bad_input.py holds the older corpus
with each input's exact problem type, tests/faults/test_hostile_wire.py what only a real
server sees; test_the_hostile_suite_counts_at_least_450_inputs counts the three.
"""

from __future__ import annotations

import json
import logging

import pytest
from django.contrib import admin
from django.test import Client

from receipts.models import Receipt
from receipts.outbox.models import OutboxMessage
from tests.faults.test_bad_input import CORPUS, VIEW_CORPUS, World, shopify, snapshot, standard, stripe, view, world  # noqa: F401
from tests.faults.test_hostile_wire import WIRE_CASES
from tests.faults.urls import VIEW_KINDS
from webhooks.models import RejectedDelivery, WebhookEvent

pytestmark = [pytest.mark.urls("tests.faults.urls"), pytest.mark.django_db]

PROBLEM = "application/problem+json"


# Django's own security log: a SuspiciousOperation (too many form fields) is logged at ERROR
# by design, so that an operator sees it; it is not a failure of ours.
SECURITY_LOG = "django.security."


@pytest.fixture(autouse=True)
def no_error_logged(caplog):
    caplog.set_level(logging.WARNING)
    yield
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and not r.name.startswith(SECURITY_LOG)]
    assert not errors, [f"{r.name}: {r.getMessage()}" for r in errors]


def assert_problem(response, status: int | None = None) -> dict:
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:400])
    if status is not None:
        assert response.status_code == status, response.content[:400]
    assert response["Content-Type"] == PROBLEM
    body = response.json()
    assert body["status"] == response.status_code and body["type"].startswith("urn:idemdash:problem:")
    return body


# --- the Idempotency-Key header on a decorated view -----------------------------------------

CONTROL_KEYS = [f"k{chr(c)}1" for c in [*range(0x00, 0x20), 0x7F]]
UNICODE_KEYS = ["k\u00e91", "k\u00a01", "k\u200b1", "\ufeffk1", "k\u20281", "k\U0001f5dd1", "k\u04341", "\u0131"]
SHAPE_KEYS = ["", " ", "\t", '"', '"k', 'k"', '""', '"\\"', "a,b", " , ", "k" * 256, '"' + "k" * 256 + '"',
              '"k\\q"', '"k\x01"']
KEY_CASES = [pytest.param(k, id=f"key {k[:20]!r}") for k in CONTROL_KEYS + UNICODE_KEYS + SHAPE_KEYS]


@pytest.mark.parametrize("kind", VIEW_KINDS)
@pytest.mark.parametrize("key", KEY_CASES)
def test_a_hostile_idempotency_key_is_400_and_runs_nothing_in_any_kind_of_view(world, key, kind):
    before = snapshot()
    assert_problem(view(key)(world, kind), 400)["type"].endswith("idempotency-key-invalid")
    assert snapshot() == before


# --- the JSON API, field by field -----------------------------------------------------------

NOT_TEXT = [None, 7, True, 1.5, [], {}]
BAD_KEYS = [*NOT_TEXT, "", "a" * 256, "a\u0000b", "a\r\nb", "cl\u00e9", "\ud800"]
BAD_OPERATIONS = [*NOT_TEXT, "", "a b", "a" * 101, "op\n", "op\u0000", "op/\u00e9"]
BAD_LEASES = [0, -1, 1.5, "5", True, 10**12, [], {}, "1e3"]
BAD_WAITS = [-1, "5", True, [], {}, 10**9, -0.5]
BAD_TOKENS = [None, "1", True, 1.5, 2**64, -(2**64), [], {}]
BAD_ERRORS = [None, "", "  ", 7, [], {}, "\ud800"]
BAD_RETRYABLE = ["yes", 1, 0, None, [], "true"]


def api_field_cases() -> list:
    claim = {"key": "k-1", "operation": "x"}
    settle = {"key": "k-1", "token": 1}
    table = [
        *[("claim", claim, "key", v) for v in BAD_KEYS],
        *[("claim", claim, "operation", v) for v in BAD_OPERATIONS],
        *[("claim", claim, "lease_seconds", v) for v in BAD_LEASES],
        *[("claim", claim, "wait_seconds", v) for v in BAD_WAITS],
        *[("complete", {**settle, "response": {}}, "key", v) for v in BAD_KEYS],
        *[("complete", {**settle, "response": {}}, "token", v) for v in BAD_TOKENS],
        *[("fail", {**settle, "error": "x"}, "token", v) for v in BAD_TOKENS],
        *[("fail", {**settle, "error": "x"}, "error", v) for v in BAD_ERRORS],
        *[("fail", {**settle, "error": "x"}, "retryable", v) for v in BAD_RETRYABLE],
    ]
    return [pytest.param(endpoint, {**base, field: value}, id=f"{endpoint} {field}={value!r:.30}")
            for endpoint, base, field, value in table]


API_FIELD_CASES = api_field_cases()


@pytest.mark.parametrize("endpoint, body", API_FIELD_CASES)
def test_a_hostile_json_api_field_is_a_4xx_problem_and_stores_nothing(world, endpoint, body):
    before = snapshot()
    response = world.client.post(f"/api/v1/receipts/{endpoint}", json.dumps(body), content_type="application/json",
                                 headers={"Authorization": f"Bearer {world.token}"})
    assert_problem(response)
    assert snapshot() == before


LOOKUP_CASES = [pytest.param(q, id=f"lookup {q[:24]!r}")
                for q in ["key=%00", "key=a%00b", "key=", "key=" + "k" * 300, "key=%ff%fe", "key=a&key=b", "", "key=%0d%0a"]]


@pytest.mark.parametrize("query", LOOKUP_CASES)
def test_a_hostile_receipt_lookup_is_a_4xx_problem(world, query):
    response = world.client.get(f"/api/v1/receipts/?{query}", headers={"Authorization": f"Bearer {world.token}"})
    assert_problem(response)


# --- the outbox API: what an action could never send, refused with its field -----------------

def http_post(**change) -> dict:
    payload = {"url": "https://hooks.example.com/in", "json": {}, "headers": {"X-Trace": "t-1"}}
    return {**payload, **change}


def email(**change) -> dict:
    return {"to": "ops@example.com", "subject": "Hello", "body": "Body", **change}


OUTBOX_CASES = [
    *[("http.post", http_post(url=url), "payload.url") for url in [
        "https://hooks.example.com/in\r\nX-Injected: 1", "https://hooks.example.com/a b",
        "ftp://hooks.example.com/", "https:///no-host", "https://hooks.example.com:port/", "not a url", "",
        7, None, "javascript:alert(1)", "https://hooks.example.com/\t", "//hooks.example.com/", "https://[::1/"]],
    *[("http.post", http_post(headers={name: "v"}), f"payload.headers.{name}") for name in [
        "X Trace", "X-Trace:", "X-Trace\r\nX-Injected", "", "X-Tr\u00e4ce", "(X)", "X/Y", "X@Y"]],
    *[("http.post", http_post(headers={"X-Trace": value}), "payload.headers.X-Trace") for value in [
        "a\r\nX-Injected: 1", "a\nb", "a\rb", "caf\u00e9", "\x7f", "a\x01b", 7, None, ["a"], {"a": 1}]],
    ("http.post", http_post(headers=["X-Trace", "t"]), "payload.headers"),
    ("http.post", http_post(headers="X-Trace: t"), "payload.headers"),
    ("http.post", ["https://hooks.example.com/in"], "payload"),
    *[("email.send", email(subject=subject), "payload.subject") for subject in [
        "Hello\r\nBcc: victim@example.com", "Hello\nBcc: x@example.com", "Hello\rWorld", "a\x01b", "a\x1bb", "\x7f",
        7, None, ["Hello"]]],
    *[("email.send", email(to=to), "payload.to") for to in [
        "ops@example.com\r\nBcc: victim@example.com", "ops@example.com\n", "not-an-address", "", [], [7], 7, None,
        "ops@", "@example.com", "a b@example.com", ["ops@example.com", "bad"]]],
    *[("email.send", email(cc=cc), "payload.cc") for cc in ["x@example.com\r\nBcc: y@example.com", "bad", [1], 7]],
    *[("email.send", email(**{"from": sender}), "payload.from") for sender in [
        "me@example.com\r\nBcc: y@example.com", "nobody", 7, ["a@example.com"]]],
    ("email.send", email(body=7), "payload.body"),
    ("email.send", email(body=None), "payload.body"),
    ("email.send", "to ops", "payload"),
    # NUL anywhere in a payload: refused before the action looks (no database stores it).
    ("http.post", http_post(url="https://hooks.example.com/\x00"), "payload"),
    ("http.post", http_post(headers={"X-Trace\x00": "v"}), "payload"),
    ("http.post", http_post(headers={"X-Trace": "a\x00b"}), "payload"),
    ("email.send", email(subject="a\x00b"), "payload"),
]
OUTBOX_PARAMS = [pytest.param(action, payload, field, id=f"{action} {field} {json.dumps(payload)[:60]}")
                 for action, payload, field in OUTBOX_CASES]


@pytest.mark.parametrize("action, payload, field", OUTBOX_PARAMS)
def test_an_outbox_message_that_could_never_be_sent_is_422_naming_its_field(world, action, payload, field):
    before = snapshot()
    body = {"key": "never-sendable", "action": action, "payload": payload}
    response = world.client.post("/api/v1/outbox", json.dumps(body), content_type="application/json",
                                 headers={"Authorization": f"Bearer {world.token}"})
    problem = assert_problem(response)
    if field == "payload" and "\\u0000" in json.dumps(payload):
        assert (response.status_code, problem["type"]) == (400, "urn:idemdash:problem:invalid-field")
    else:
        assert (response.status_code, problem["type"]) == (422, "urn:idemdash:problem:invalid-message")
    assert problem["field"] == field, problem
    assert snapshot() == before


def test_the_outbox_still_takes_what_it_can_send(world):
    for n, (action, payload) in enumerate([("http.post", http_post(headers={"X-Trace": "a\tb"})),
                                           ("email.send", email(to=["Ops <ops@example.com>"], cc="cc@example.com"))]):
        response = world.client.post("/api/v1/outbox", json.dumps({"key": f"ok-{n}", "action": action, "payload": payload}),
                                     content_type="application/json", headers={"Authorization": f"Bearer {world.token}"})
        assert response.status_code == 201, response.content
    assert OutboxMessage.objects.count() == 2


# --- webhooks: each provider, signed and unsigned, with and without the slash ----------------

BODIES = {
    "empty": b"", "json null": b"null", "a json array": b"[]", "an empty object": b"{}", "a json string": b'"evt"',
    "not json": b"hello", "not utf 8": b'{"id": "\xff"}', "a NUL escape": b'{"id": "evt_n", "note": "\\u0000"}',
    "a lone surrogate": b'{"id": "evt_s", "note": "\\ud800"}', "a number beyond a double": b'{"id": "evt_b", "n": 1e400}',
    "NaN": b'{"id": "evt_nan", "n": NaN}', "nested 200 deep": b'{"id": "evt_d", "d": ' + b"[" * 200 + b"]" * 200 + b"}",
    "an id with CRLF": b'{"id": "evt_1\\r\\nX: 1", "type": "a.b"}', "an id that is a number": b'{"id": 7, "type": "a.b"}',
    "a 600 character id": b'{"id": "' + b"e" * 600 + b'", "type": "a.b"}',
}
PROVIDERS = {"stripe": stripe, "shopify": shopify, "standard": standard}


def unsigned(provider: str, body: bytes, slash: str):
    def send(w: World):
        return w.client.post(f"/webhooks/{provider}-in{slash}", body, content_type="application/json")

    return send


def signed(provider: str, body: bytes, slash: str):
    sender = PROVIDERS[provider](body)

    def send(w: World):
        # The senders post to /webhooks/<slug>/; here the path may drop the slash.
        post = w.client.post

        def post_to(path, *args, **kwargs):
            return post(path.rstrip("/") + slash, *args, **kwargs)

        w.client.post = post_to
        try:
            return sender(w)
        finally:
            w.client.post = post

    return send


WEBHOOK_CASES = [
    pytest.param(make(provider, body, slash), id=f"{provider} {kind} {name}{' no slash' if not slash else ''}")
    for provider in PROVIDERS
    for kind, make in (("signed", signed), ("unsigned", unsigned))
    for name, body in BODIES.items()
    for slash in (("/", "") if name in ("an empty object", "not json") else ("/",))
]


@pytest.mark.parametrize("send", WEBHOOK_CASES)
def test_a_hostile_webhook_is_rejected_once_or_stored_whole(world, send):
    before = snapshot()
    response = send(world)
    after = snapshot()
    if response.status_code >= 400:
        problem = assert_problem(response)
        assert after.pop("RejectedDelivery") == before.pop("RejectedDelivery") + 1
        assert RejectedDelivery.objects.get().cause == problem["cause"]
        assert after == before
    else:
        assert response.status_code == 200, response.content[:300]
        event = WebhookEvent.objects.get()
        assert event.payload is not None and after["WebhookEvent"] == before["WebhookEvent"] + 1


def test_a_signed_delivery_to_the_path_without_its_slash_is_received_not_redirected(world):
    response = signed("stripe", b'{"id": "evt_slash", "type": "a.b", "data": {"object": {}}}', "")(world)
    assert response.status_code == 200, response.content
    assert WebhookEvent.objects.get().dedupe_key == "evt_slash"


# --- the dashboard's and the admin's GET parameters -------------------------------------------

NUL = "a\x00b"
GARBAGE = ["-1", "9" * 40, "' OR 1=1 --", "\U0001f600", "x" * 3000, "2026-13-45T25:61", "%ff", "\r\n"]
DASHBOARD_PARAMS = {
    "/": ["window"],
    "/stuck/": ["after"],
    "/receipts/": ["q", "status", "operation", "scope", "conflict", "since", "until", "sort", "after"],
    "/events/": ["q", "endpoint", "provider", "type", "status", "since", "until", "after"],
    "/rejected/": ["endpoint", "provider", "cause", "since", "until", "after"],
    "/outbox/": ["q", "action", "status", "scope", "since", "until", "after"],
    "/audit/": ["actor", "action", "kind", "object", "run", "since", "until", "after_id", "through_id"],
    "/alerts/": ["state", "after"],
}
DASHBOARD_VALUES = [NUL, *GARBAGE]
# One test per parameter, each value in turn (a login per test is most of a test's time).
DASHBOARD_CASES = [pytest.param(page, param, id=f"{page} {param}")
                   for page, params in DASHBOARD_PARAMS.items() for param in params]


@pytest.fixture
def browser(django_user_model) -> Client:
    """A superuser's browser; created without a password (hashing one is most of a test's time)."""
    client = Client(HTTP_ACCEPT="text/html")
    client.force_login(django_user_model.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


@pytest.mark.parametrize("page, param", DASHBOARD_CASES)
def test_a_hostile_dashboard_parameter_gets_a_page_not_a_500(browser, page, param):
    before = snapshot()
    for value in DASHBOARD_VALUES:
        response = browser.get(page, {param: value})
        assert response["Content-Type"].startswith("text/html"), value
        if "\x00" in value:
            assert response.status_code == 400, value
        else:
            # The page, or (400) the page again with the filter form saying what it refused.
            assert response.status_code in (200, 400), (value, response.content[:300])
            if response.status_code == 400:
                assert b'class="alert alert-error"' in response.content, value
    assert snapshot() == before


MACHINE_CASES = [pytest.param(path, value, id=f"{path} window={value[:12]!r}")
                 for path in ("/api/v1/stats",) for value in [NUL, *GARBAGE, "1h,7d"]]


@pytest.mark.parametrize("path, value", MACHINE_CASES)
def test_a_hostile_stats_window_is_a_400_problem(admin_client, path, value):
    assert_problem(admin_client.get(path, {"window": value}), 400)


def admin_params(model_admin: admin.ModelAdmin) -> list[str]:
    params = ["q", "o", "p", "e", "all", "_to_field", "bogus"]
    for name in model_admin.list_filter[:2]:
        if isinstance(name, str):
            params.append(f"{name}__exact")
    if model_admin.date_hierarchy:
        params += [f"{model_admin.date_hierarchy}__year", f"{model_admin.date_hierarchy}__month"]
    return params


def admin_values(param: str) -> list[str]:
    if param.endswith(("__year", "__month")):
        return [NUL, "9" * 40, "' OR 1=1 --", "9999", "0", "-1"]
    if param in ("q", "o", "p") or "__" in param:
        return [NUL, "9" * 40, "' OR 1=1 --"]
    return [NUL]


ADMIN_CASES = [
    pytest.param(f"/admin/{model._meta.app_label}/{model._meta.model_name}/", param,
                 id=f"admin {model._meta.label_lower} {param}")
    for model, model_admin in sorted(admin.site._registry.items(), key=lambda item: item[0]._meta.label_lower)
    if model._meta.app_label in ("idemdash_core", "receipts", "outbox", "webhooks", "idemdash_dashboard", "auth")
    for param in admin_params(model_admin)
]
ADMIN_INPUTS = sum(len(admin_values(case.values[1])) for case in ADMIN_CASES)


@pytest.mark.parametrize("changelist, param", ADMIN_CASES)
def test_a_hostile_admin_changelist_parameter_is_never_a_500(browser, changelist, param):
    before = snapshot()
    for value in admin_values(param):
        response = browser.get(changelist, {param: value})
        if "\x00" in value:
            assert response.status_code == 400, value
        else:
            # The changelist, or the admin's own answer to a filter it cannot apply: ?e=1.
            assert response.status_code in (200, 302), (value, response.content[:300])
            if response.status_code == 302:
                assert response["Location"].endswith("?e=1"), value
    assert snapshot() == before


def test_a_nul_in_an_admin_object_path_is_400(browser):
    assert browser.get("/admin/receipts/receipt/1%00/change/").status_code == 400


# --- the login form -------------------------------------------------------------------------

LOGIN_CASES = [
    pytest.param(username, password, id=f"login {username[:12]!r} {password[:12]!r}")
    for username, password in [
        ("admin\x00", "pw"), ("admin", "pw\x00"), ("admin\r\nX: 1", "pw"), ("x" * 5000, "pw"), ("admin", "p" * 5000),
        ("", ""), ("admin\u2028", "pw"), ("admin' --", "' OR '1'='1"), ("\U0001f600", "\U0001f600"), (" admin ", "wrong"),
    ]
]


@pytest.mark.parametrize("username, password", LOGIN_CASES)
def test_a_hostile_login_is_refused_with_the_form(admin_user, username, password):
    client = Client(HTTP_ACCEPT="text/html")
    before = snapshot()
    response = client.post("/accounts/login/", {"username": username, "password": password})
    assert response.status_code in (200, 400), response.content[:300]
    assert "_auth_user_id" not in client.session
    assert snapshot() == before


FORM_BODIES = [
    ("multipart/form-data", b"username=admin&password=wrong"),
    ("multipart/form-data; boundary=", b"--\r\n"),
    ("multipart/form-data; boundary=xx", b'--xx\r\nContent-Disposition: form-data; name="username"\r\n\r\nadmin\r\n'),
    ("multipart/form-data; boundary=xx", b"garbage"),
    ("application/x-www-form-urlencoded", b"username=%zz&password=%"),
    ("application/x-www-form-urlencoded", b"&".join(b"f%d=1" % i for i in range(1500))),
    ("text/plain", b"\x00\x01"),
    ("application/json", b'{"username": "admin", "password": "wrong"}'),
]
FORM_BODY_CASES = [pytest.param(path, content_type, body, id=f"{path} {content_type} {body[:16]!r}")
                   for path in ("/accounts/login/", "/admin/login/") for content_type, body in FORM_BODIES]


@pytest.mark.parametrize("path, content_type, body", FORM_BODY_CASES)
def test_a_malformed_login_body_is_the_form_again_or_400(admin_user, path, content_type, body):
    client = Client(HTTP_ACCEPT="text/html", enforce_csrf_checks=False)
    before = snapshot()
    response = client.post(path, body, content_type=content_type)
    assert response.status_code in (200, 400), response.content[:300]
    assert "_auth_user_id" not in client.session
    assert snapshot() == before


# --- the count -----------------------------------------------------------------------------

SUITE = {
    "bad input corpus (test_bad_input.py)": len(CORPUS),
    "bad input corpus on the other kinds of view (test_bad_input.py)": len(VIEW_CORPUS),
    "idempotency keys, on every kind of view": len(KEY_CASES) * len(VIEW_KINDS),
    "json api fields": len(API_FIELD_CASES),
    "receipt lookups": len(LOOKUP_CASES),
    "outbox payloads": len(OUTBOX_PARAMS),
    "webhooks": len(WEBHOOK_CASES),
    "dashboard parameters": len(DASHBOARD_CASES) * len(DASHBOARD_VALUES),
    "stats windows": len(MACHINE_CASES),
    "admin parameters": ADMIN_INPUTS,
    "login form": len(LOGIN_CASES) + len(FORM_BODY_CASES),
    "wire (test_hostile_wire.py)": WIRE_CASES,
}


def test_the_hostile_suite_counts_at_least_450_inputs():
    assert sum(SUITE.values()) >= 450, SUITE
    assert all(SUITE.values()), SUITE
