"""Every documented problem type has its typed error in the Python clients
(idemdash_client/errors.py:PROBLEM_ERRORS): the table of docs/http-contract.md ("Problem
types"), which holds every type of the OpenAPI description's ProblemType and those of the
decorated views and webhooks. A new problem type documented without a class fails here; so
does a class left behind by a type that is gone, or one named unlike the TypeScript client's.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

import idemdash_client
import receipts
from idemdash_client import (
    PROBLEM_ERRORS,
    PROBLEM_PREFIX,
    ApiError,
    AsyncIdempotencyClient,
    IdempotencyClient,
    IdempotencyError,
    problem_error,
)

ROOT = Path(__file__).resolve().parents[3]


def documented_slugs() -> list[str]:
    page = (ROOT / "docs" / "http-contract.md").read_text()
    table = page[page.index("## Problem types"):page.index("## Requests the server refuses")]
    return re.findall(r"^\| `urn:idemdash:problem:([a-z-]+)` \|", table, re.M)


def described_slugs() -> set[str]:
    spec = json.loads((ROOT / "receipts" / "openapi.json").read_text())
    return {t.removeprefix(PROBLEM_PREFIX) for t in spec["components"]["schemas"]["ProblemType"]["enum"]}


def typescript_classes() -> dict[str, str]:
    source = (ROOT / "clients" / "typescript" / "src" / "errors.ts").read_text()
    start = source.index("export const PROBLEM_ERRORS")
    table = source[start:source.index("});", start)]
    return dict(re.findall(r'^\s*"?([a-z-]+)"?: (\w+),$', table, re.M))


def test_the_documented_tables_are_read():
    assert len(documented_slugs()) >= 30 and len(described_slugs()) >= 25
    assert len(typescript_classes()) >= 30


def test_every_documented_problem_type_and_only_those_has_its_class():
    assert sorted(PROBLEM_ERRORS) == sorted(documented_slugs())


def test_every_type_the_openapi_description_lists_has_its_class():
    assert described_slugs() <= set(PROBLEM_ERRORS), sorted(described_slugs() - set(PROBLEM_ERRORS))


def test_the_classes_are_the_typescript_clients_by_name():
    # One difference: Python's NotImplemented is a builtin constant, which no class shadows.
    python = {slug: error.__name__ for slug, error in PROBLEM_ERRORS.items()}
    assert python == typescript_classes() | {"not-implemented": "NotImplementedByServer"}


def test_each_class_is_named_after_its_problem_type():
    python = {slug: error.__name__ for slug, error in PROBLEM_ERRORS.items()}
    camel = {slug: "".join(word.capitalize() for word in slug.split("-")) for slug in PROBLEM_ERRORS}
    assert python == camel | {"not-implemented": "NotImplementedByServer"}


def test_each_class_belongs_to_one_problem_type():
    assert len(set(PROBLEM_ERRORS.values())) == len(PROBLEM_ERRORS)


@pytest.mark.parametrize("slug", documented_slugs())
def test_each_type_is_raised_as_its_own_class_exported_by_the_package(slug):
    error = problem_error(409, {"type": PROBLEM_PREFIX + slug, "title": "T", "detail": "D"}, 3)
    error_class = PROBLEM_ERRORS[slug]
    assert type(error) is error_class and isinstance(error, ApiError) and isinstance(error, IdempotencyError)
    assert getattr(idemdash_client, error_class.__name__) is error_class
    assert error_class.__name__ in idemdash_client.__all__
    assert (error.status, error.type, error.retry_after, str(error)) == (409, PROBLEM_PREFIX + slug, 3, "409 T: D")


@pytest.mark.parametrize("problem", [{"type": "about:blank"}, {"type": PROBLEM_PREFIX + "no-such-type"}, {}])
def test_an_unknown_type_or_a_body_that_is_no_problem_is_a_plain_api_error(problem):
    error = problem_error(502, problem)
    assert type(error) is ApiError and error.status == 502


def test_in_progress_without_retry_after_waits_a_second():
    assert problem_error(409, {"type": PROBLEM_PREFIX + "request-in-progress"}).retry_after == 1


def test_the_in_process_api_exports_the_clients_classes_themselves():
    for name in ("RequestInProgress", "IdempotencyKeyReused", "StaleToken", "OutcomeUnknown", "PreviousFailure"):
        assert getattr(receipts, name) is getattr(idemdash_client, name)
    assert receipts.current is idemdash_client.current


# --- what both clients raise for an answer on the wire ---------------------------------------

def answering(status: int, body: bytes, headers: dict[str, str]):
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    return handler


@pytest.mark.parametrize("slug", documented_slugs())
def test_both_clients_raise_the_class_of_the_problem_the_server_answers(slug):
    status = 400 if slug != "database-unavailable" else 503
    body = json.dumps({"type": PROBLEM_PREFIX + slug, "title": "T", "status": status, "detail": "D"}).encode()
    headers = {"Content-Type": "application/problem+json", "Retry-After": "2"}
    with IdempotencyClient("http://api.invalid", "idem_x", transport=httpx.MockTransport(answering(status, body, headers)),
                           max_unavailable_retries=0) as sync:
        with pytest.raises(PROBLEM_ERRORS[slug]) as caught:
            sync.claim("k", "email.send")
    assert caught.value.retry_after == 2 and caught.value.problem["detail"] == "D"

    async def claim() -> None:
        transport = httpx.MockTransport(answering(status, body, headers))
        async with AsyncIdempotencyClient("http://api.invalid", "idem_x", transport=transport,
                                          max_unavailable_retries=0) as client:
            await client.claim("k", "email.send")

    with pytest.raises(PROBLEM_ERRORS[slug]):
        asyncio.run(claim())


def test_a_proxys_html_page_is_a_plain_api_error_with_its_text():
    transport = httpx.MockTransport(answering(502, b"<html>Bad Gateway</html>", {"Content-Type": "text/html"}))
    with IdempotencyClient("http://api.invalid", "idem_x", transport=transport) as client:
        with pytest.raises(ApiError) as caught:
            client.claim("k", "email.send")
    assert type(caught.value) is ApiError and caught.value.status == 502
    assert "Bad Gateway" in caught.value.problem["detail"]
