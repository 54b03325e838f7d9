"""RFC 9457 problem details: the one shape of every error a client sees."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpResponse

CONTENT_TYPE = "application/problem+json"

# type URIs are stable identifiers (documented in docs/http-contract.md, "Problem types"), not links.
TYPE_PREFIX = "urn:idemdash:problem:"


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str = "",
    *,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> HttpResponse:
    body = {"type": TYPE_PREFIX + slug, "title": title, "status": status, "detail": detail, **extra}
    response = HttpResponse(json.dumps(body), status=status, content_type=CONTENT_TYPE)
    for name, value in (headers or {}).items():
        response[name] = value
    return response
