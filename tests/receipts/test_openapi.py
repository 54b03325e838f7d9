"""The OpenAPI description of the JSON API (receipts/openapi.json, served by
receipts/openapi.py): a valid OpenAPI 3.1 document, served as packaged, describing every
route under /api/v1/ and every problem type the API answers, agreeing with the examples of
the docs and with what the views answer; and Schemathesis, against a live gunicorn, finds
no 5xx and no answer it does not describe."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi

from idemdash.core.problems import CONTENT_TYPE, TYPE_PREFIX
from idemdash.dashboard.queries import FIELD_DOCS
from idemdash.core.clients import create_token
from receipts.openapi import DOCUMENT
from tests.gunicorn import Gunicorn

ROOT = Path(__file__).resolve().parents[2]
SPEC: dict[str, Any] = json.loads(DOCUMENT.read_text())

# The modules whose answers reach an /api/v1/ client: the views, their front door, the
# middleware in front of every request, the error handlers under /api/, and the gunicorn
# worker that answers what it cannot parse.
API_MODULES = [
    "receipts/api.py", "receipts/outbox/api.py", "receipts/responses.py", "receipts/middleware.py",
    "receipts/openapi.py", "idemdash/core/jsonapi.py", "idemdash/core/clients.py",
    "idemdash/dashboard/views/machine.py", "idemdash/errors.py", "idemdash/serving.py",
]
# Answered by those modules, but only outside /api/: idemdash/errors.py under /webhooks/.
NOT_API = {"webhook-endpoint-not-found"}


def schema_errors(schema: dict, value: Any) -> list[str]:
    # The description's components beside the schema, so that its `#/components/...` refs resolve.
    validator = Draft202012Validator({**schema, "components": SPEC["components"]},
                                     format_checker=Draft202012Validator.FORMAT_CHECKER)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(value)]


def assert_valid(name: str, value: Any) -> None:
    errors = schema_errors({"$ref": f"#/components/schemas/{name}"}, value)
    assert not errors, (name, value, errors)


def problem_types(node: Any) -> set[str]:
    """Every problem type a part of the description names (`const` or `enum` under `type`)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("const", "enum"):
                values = value if isinstance(value, list) else [value]
                found |= {v for v in values if isinstance(v, str) and v.startswith(TYPE_PREFIX)}
            else:
                found |= problem_types(value)
    elif isinstance(node, list):
        for item in node:
            found |= problem_types(item)
    return found


def described_response(path: str, method: str, status: int) -> tuple[str, dict]:
    """The content type and schema the description gives for this answer, refs resolved."""
    responses = SPEC["paths"][path][method.lower()]["responses"]
    assert str(status) in responses, f"{method} {path} answered {status}, which is not described"
    response = responses[str(status)]
    if "$ref" in response:
        response = SPEC["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    ((content_type, media),) = response["content"].items()
    return content_type, media["schema"]


def assert_described(answer, path: str, method: str = "POST") -> None:
    """The answer of the Django test client is one the description gives for this operation."""
    content_type, schema = described_response(path, method, answer.status_code)
    assert answer["Content-Type"].split(";")[0] == content_type
    errors = schema_errors(schema, answer.json())
    assert not errors, (method, path, answer.status_code, answer.json(), errors)


# --- the document itself ------------------------------------------------------------------------


def test_the_description_is_valid_openapi_3_1():
    assert SPEC["openapi"].startswith("3.1.")
    validate_openapi(SPEC)


def test_every_schema_in_the_description_is_valid_json_schema():
    for name, schema in SPEC["components"]["schemas"].items():
        Draft202012Validator.check_schema(schema)


def test_the_server_serves_the_packaged_description_without_a_token(client, db):
    answer = client.get("/api/v1/openapi.json")
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/json"
    assert answer.content == DOCUMENT.read_bytes()
    assert "public" in answer["Cache-Control"] and "max-age=3600" in answer["Cache-Control"]


def test_the_description_refuses_a_post_with_a_problem_not_an_empty_page(db):
    # A real client's POST: without the exemption, CSRF's HTML 403 came before the 405.
    answer = Client(enforce_csrf_checks=True).post("/api/v1/openapi.json")
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"
    assert answer["Content-Type"] == CONTENT_TYPE
    assert answer.json()["type"] == TYPE_PREFIX + "method-not-allowed"


def test_the_stats_refuse_a_post_with_a_problem_not_an_empty_page(db):
    # Before: require_GET's empty text/html 405, or CSRF's HTML 403 to a real client.
    answer = Client(enforce_csrf_checks=True).post("/api/v1/stats")
    assert answer.status_code == 405 and answer["Allow"] == "GET"
    assert answer["Content-Type"] == CONTENT_TYPE
    assert answer.json()["type"] == TYPE_PREFIX + "method-not-allowed"


def _routes(patterns: list, prefix: str = "") -> set[str]:
    routes: set[str] = set()
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            routes |= _routes(entry.url_patterns, route)
        elif isinstance(entry, URLPattern):
            routes.add("/" + route)
    return routes


def test_every_route_under_api_v1_is_described_and_nothing_else():
    served = {route for route in _routes(get_resolver("idemdash.urls").url_patterns) if route.startswith("/api/v1/")}
    assert "/api/v1/receipts/claim" in served and "/api/v1/outbox" in served  # the walk finds them
    assert served == set(SPEC["paths"])


def test_every_link_names_an_operation_of_the_description():
    operations = {op["operationId"] for item in SPEC["paths"].values() for op in item.values()}
    targets = [link["operationId"] for item in SPEC["paths"].values() for op in item.values()
               for response in op["responses"].values() for link in response.get("links", {}).values()]
    assert targets and set(targets) <= operations


def test_every_problem_type_the_api_answers_is_described():
    answered: set[str] = set()
    for name in API_MODULES:
        text = (ROOT / name).read_text()
        answered |= set(re.findall(r'problem\(\s*\d{3},\s*"([a-z-]+)"', text))
        answered |= set(re.findall(r"urn:idemdash:problem:([a-z-]+)", text))
    # gunicorn's refusals: (exception, status, reason, slug) rows.
    answered |= set(re.findall(r'\d{3}, "[^"]*", "([a-z-]+)"\)', (ROOT / "idemdash/serving.py").read_text()))
    assert {"receipt-not-found", "request-in-progress", "database-unavailable", "bad-window"} <= answered
    listed = {t.removeprefix(TYPE_PREFIX) for t in SPEC["components"]["schemas"]["ProblemType"]["enum"]}
    assert answered - NOT_API <= listed, sorted(answered - NOT_API - listed)


def test_every_problem_type_an_operation_answers_is_a_listed_one_and_every_listed_one_is_documented():
    listed = set(SPEC["components"]["schemas"]["ProblemType"]["enum"])
    named = problem_types(SPEC["paths"]) | problem_types(SPEC["components"]["responses"])
    assert named <= listed, sorted(named - listed)
    page = (ROOT / "docs" / "http-contract.md").read_text()
    documented = {TYPE_PREFIX + slug for slug in re.findall(r"^\| `urn:idemdash:problem:([a-z-]+)` \|", page, re.M)}
    assert listed <= documented, sorted(listed - documented)


def test_the_stats_schema_has_every_documented_figure():
    stats = SPEC["components"]["schemas"]["Stats"]["properties"]
    assert {block: set(stats[block]["properties"]) for block in FIELD_DOCS} == {
        block: set(fields) for block, fields in FIELD_DOCS.items()
    }


def test_every_example_in_the_description_validates_against_its_schema():
    media = [
        (f"{method.upper()} {path}", body)
        for path, item in SPEC["paths"].items() for method, operation in item.items()
        for body in operation.get("requestBody", {}).get("content", {}).values()
    ]
    with_example = [(label, body) for label, body in media if "example" in body]
    assert len(with_example) == len(media) == 5  # every request body has one
    for label, body in with_example:
        assert not schema_errors(body["schema"], body["example"]), label


# --- the examples of the docs ---------------------------------------------------------------------

CURL = re.compile(r"curl -s -X POST http://127\.0\.0\.1:8000(?P<path>/api/v1/\S+) \\\n.*?-d '(?P<body>[^']+)'", re.S)
REQUEST_SCHEMAS = {
    "/api/v1/receipts/claim": "ClaimRequest",
    "/api/v1/receipts/complete": "CompleteRequest",
    "/api/v1/receipts/fail": "FailRequest",
    "/api/v1/receipts/heartbeat": "HeartbeatRequest",
    "/api/v1/outbox": "OutboxMessageRequest",
}


def test_every_request_example_of_the_json_api_page_validates():
    examples = [(m["path"], json.loads(m["body"])) for m in CURL.finditer((ROOT / "docs/json-api.md").read_text())]
    assert [path for path, _ in examples] == ["/api/v1/receipts/claim", "/api/v1/receipts/complete"]
    for path, body in examples:
        assert_valid(REQUEST_SCHEMAS[path], body)


def test_the_stats_example_of_the_dashboard_page_validates():
    page = (ROOT / "docs/dashboard.md").read_text()
    block = page[page.index('    {"window": "24h",'):]
    block = block[: block.index("\n\n")]
    assert_valid("Stats", json.loads(block))


# --- what the views answer, case by case ---------------------------------------------------------


@pytest.fixture
def api(db) -> Client:
    _, token = create_token("described")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def post(api: Client, path: str, body: Any, **extra: Any):
    return api.post(path, json.dumps(body), content_type="application/json", **extra)


def test_a_claim_a_replay_and_each_refusal_are_answered_as_described(api):
    claim = "/api/v1/receipts/claim"
    first = post(api, claim, {"key": "k", "operation": "email.send", "request": {"to": "a"}})
    assert first.status_code == 201
    assert_described(first, claim)
    token = first.json()["token"]
    held = post(api, claim, {"key": "k", "operation": "email.send", "request": {"to": "a"}})
    assert held.status_code == 409 and int(held["Retry-After"]) == held.json()["retry_after"]
    assert_described(held, claim)
    reused = post(api, claim, {"key": "k", "operation": "email.send", "request": {"to": "b"}})
    assert reused.status_code == 422
    assert_described(reused, claim)
    beat = post(api, "/api/v1/receipts/heartbeat", {"key": "k", "token": token, "lease_seconds": 60})
    assert beat.status_code == 200
    assert_described(beat, "/api/v1/receipts/heartbeat")
    done = post(api, "/api/v1/receipts/complete", {"key": "k", "token": token, "response": {"id": 7}})
    assert done.status_code == 200
    assert_described(done, "/api/v1/receipts/complete")
    replay = post(api, claim, {"key": "k", "operation": "email.send", "request": {"to": "a"}})
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert_described(replay, claim)
    stale = post(api, "/api/v1/receipts/fail", {"key": "k", "token": token + 1, "error": "boom"})
    assert stale.status_code == 409
    assert_described(stale, "/api/v1/receipts/fail")
    got = api.get("/api/v1/receipts/", {"key": "k"})
    assert got.status_code == 200
    assert_described(got, "/api/v1/receipts/", "GET")


def test_a_failure_and_its_replay_are_answered_as_described(api):
    claim = "/api/v1/receipts/claim"
    token = post(api, claim, {"key": "f", "operation": "charge"}).json()["token"]
    failed = post(api, "/api/v1/receipts/fail", {"key": "f", "token": token, "error": "boom", "retryable": False})
    assert failed.status_code == 200
    assert_described(failed, "/api/v1/receipts/fail")
    replay = post(api, claim, {"key": "f", "operation": "charge"})
    assert replay.status_code == 200 and replay.json()["error"] == "boom"
    assert_described(replay, claim)


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/api/v1/receipts/complete", {"key": "none", "token": 1, "response": 1}, 404),
        ("POST", "/api/v1/receipts/heartbeat", {"key": "none", "token": 1}, 404),
        ("POST", "/api/v1/receipts/claim", {"key": "k"}, 400),
        ("POST", "/api/v1/receipts/claim", {"key": "k", "operation": "x", "lease_seconds": True}, 400),
        ("POST", "/api/v1/outbox", {"key": "m", "action": "no.such.action"}, 422),
        ("GET", "/api/v1/receipts/", None, 400),
        ("GET", "/api/v1/receipts/?key=none", None, 404),
        ("GET", "/api/v1/stats?window=2h", None, 400),
        ("GET", "/api/v1/stats?window=1h", None, 200),
    ],
)
def test_each_answer_of_a_table_of_requests_is_described(api, method, path, body, status):
    answer = post(api, path, body) if method == "POST" else api.get(path)
    assert answer.status_code == status, answer.content
    assert_described(answer, path.split("?")[0], method)


def test_an_outbox_message_and_its_repeat_are_answered_as_described(api):
    message = {"key": "m-1", "action": "http.post", "payload": {"url": "http://127.0.0.1:9/hook", "json": {"a": 1}}}
    first = post(api, "/api/v1/outbox", message)
    again = post(api, "/api/v1/outbox", message)
    assert (first.status_code, again.status_code) == (201, 200)
    assert_described(first, "/api/v1/outbox")
    assert_described(again, "/api/v1/outbox")


def test_a_request_without_a_token_is_answered_as_described(db):
    answer = Client().post("/api/v1/receipts/claim", "{}", content_type="application/json")
    assert answer.status_code == 401 and answer["WWW-Authenticate"] == 'Bearer realm="idemdash"'
    assert_described(answer, "/api/v1/receipts/claim")


# --- Schemathesis against a live server -----------------------------------------------------------

# Every check on every answer: no 5xx, and the status, the content type, the body and the
# headers each as the description gives them for the operation.
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance"


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    """gunicorn as docs/operations.md serves the project. A claim's wait is capped at 1 s so
    that a generated `wait_seconds` on a key already held cannot hold the run for 30 s."""
    with django_db_blocker.unblock():
        server = Gunicorn(tmp_path_factory.mktemp("openapi") / "gunicorn.log", "idemdash.settings",
                          worker_class="idemdash.serving.ProblemThreadWorker", threads=2,
                          RECEIPTS_MAX_WAIT_SECONDS="1")
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(300)
def test_schemathesis_finds_no_server_error_and_no_undescribed_answer(live, tmp_path):
    """Schemathesis's CLI, from the description the server serves: the description's
    examples, then its coverage phase (each schema's boundaries, missing and wrong-typed
    fields, other content types), then fuzzing, 20 cases per operation and mode (valid and
    invalid data), then the stateful phase, which follows the claim's links to heartbeat,
    complete, fail and look up with the key claimed and its fencing token. One round of each,
    a budget in cases, not seconds: with the seed fixed, what is sent does not depend on how
    fast the machine is."""
    _, token = create_token("schemathesis")
    argv = [
        str(Path(sys.executable).with_name("st")), "--no-color", "run", live.url + "/api/v1/openapi.json",
        "--url", live.url, "--header", f"Authorization: Bearer {token}", "--checks", CHECKS,
        "--phases", "examples,coverage,fuzzing,stateful", "--mode", "all", "--max-examples", "20",
        "--seed", "1", "--generation-database", "none", "--request-timeout", "15", "--continue-on-failure",
        "--report", "junit", "--report-dir", str(tmp_path),
    ]
    run = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    report = run.stdout[-12000:] + run.stderr[-3000:]
    assert run.returncode == 0, report + "\n" + live.log()
    # It ran: every operation was tested, but the description's own, which Schemathesis leaves
    # out when it loads the description from it (tested above with the Django test client).
    (junit,) = [path.read_text() for path in tmp_path.glob("junit*.xml")]
    tested = set(re.findall(r'<testcase name="([A-Z]+ [^"]+)"', junit))
    described = {f"{method.upper()} {path}" for path, item in SPEC["paths"].items() for method in item}
    assert tested == described - {"GET /api/v1/openapi.json"}, junit[:3000]
    assert 'failures="0"' in junit and 'errors="0"' in junit
    # The stateful phase followed every link of the description at least once.
    links = [name for item in SPEC["paths"].values() for operation in item.values()
             for response in operation["responses"].values() for name in response.get("links", {})]
    covered = re.search(r"API Links:\s+(\d+) covered / \d+ selected / (\d+) total", run.stdout)
    assert covered and covered.groups() == (str(len(links)), str(len(links))) and len(links) == 4, run.stdout[-4000:]
