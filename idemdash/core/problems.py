"""RFC 9457 problem details: the one shape of every error a client sees."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

CONTENT_TYPE = "application/problem+json"

# type URIs are stable identifiers (documented in docs/http-contract.md, "Problem types"), not links.
TYPE_PREFIX = "urn:idemdash:problem:"


def problem_body(status: int, slug: str, title: str, detail: str = "", **extra: Any) -> str:
    """The JSON of a problem: for a response built here (`problem`), and for one stored or
    written where no HttpResponse is (a view's failure, idemdash/serving.py)."""
    return json.dumps({"type": TYPE_PREFIX + slug, "title": title, "status": status, "detail": detail, **extra})


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str = "",
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> HttpResponse:
    response = HttpResponse(problem_body(status, slug, title, detail, **extra), status=status, content_type=CONTENT_TYPE)
    for name, value in (headers or {}).items():
        response[name] = value
    return response
