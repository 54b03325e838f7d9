"""One JSON front door for the API views (the receipts API, the outbox API). Before a view
runs, each request is checked, in this order, and refused as problem+json: the method
(405), the bearer token (401), for a POST the media type (`application/json` or any
`+json`, 415), the size (413), the JSON itself (400 `invalid-json`: not JSON, NaN or
Infinity, nested past the parser, not an object) and its depth (400 `invalid-field`,
field `body`). The view checks its own fields with `Invalid` and `storable_text`, so bad
input gets a 4xx and writes nothing.

Plain Django, not DRF: both APIs are in the core install, where DRF is an extra.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from idemdash.core.clients import client_for_request, refused
from idemdash.core.canonical import json_depth_limit, nesting_depth
from idemdash.core.problems import problem

SURROGATE = re.compile("[\ud800-\udfff]")


class Invalid(Exception):
    """A field the view cannot take: answered 400 `invalid-field`, naming the field."""

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail


def method_not_allowed(request: HttpRequest, *allowed: str) -> HttpResponse:
    """405 as problem+json, with the Allow header: Django's own 405 (require_GET) is an
    empty text/html answer, which no API client parses."""
    methods = ", ".join(allowed)
    return problem(
        405, "method-not-allowed", "Method not allowed", f"{request.path} accepts {methods} only.",
        headers={"Allow": methods},
    )


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def read_only(*methods: str) -> Callable:
    """Django's require_http_methods for the API's read-only views (the OpenAPI description,
    the stats), answering the other methods 405 as problem+json. CSRF-exempt: a safe method
    is never checked, and any other would otherwise get CSRF's HTML 403 before its 405."""
    if not set(methods) <= SAFE_METHODS:
        raise ImproperlyConfigured(f"read_only takes safe methods only, not {sorted(set(methods) - SAFE_METHODS)}")

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @csrf_exempt
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                return method_not_allowed(request, *methods)
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


def json_api(method: str) -> Callable:
    """The front door of a view taking (request, client, body) for POST, (request, client)
    otherwise; `client` is the bearer token's ApiClient, `body` the parsed JSON object."""

    def decorator(view: Callable[..., HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
        @csrf_exempt  # bearer-token auth: no cookie, so no cross-site request to forge
        @functools.wraps(view)
        def wrapper(request: HttpRequest) -> HttpResponse:
            if request.method != method:
                return method_not_allowed(request, method)
            client = client_for_request(request)
            if client is None:
                return refused(
                    request,
                    "Bearer token required",
                    "Send Authorization: Bearer <token> with a token from `manage.py create_api_token`.",
                )
            if method != "POST":
                return view(request, client)
            media_type = request.META.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
            if media_type != "application/json" and not media_type.endswith("+json"):
                return problem(
                    415,
                    "unsupported-media-type",
                    "JSON required",
                    "Send the body with Content-Type: application/json.",
                )
            try:
                raw = request.body
            except RequestDataTooBig:
                return problem(413, "payload-too-large", "Request body too large", "The body exceeds the size limit.")
            try:
                body = json.loads(raw, parse_constant=_refuse_constant)
            except (ValueError, RecursionError) as exc:
                # ValueError includes UnicodeDecodeError; RecursionError: a body nested
                # past the parser's limit must not become a 500.
                return problem(400, "invalid-json", "Body is not valid JSON", str(exc)[:200])
            if not isinstance(body, dict):
                return problem(400, "invalid-json", "Body must be a JSON object", "")
            try:
                _check_depth(body)
                return view(request, client, body)
            except Invalid as invalid:
                return problem(400, "invalid-field", f"Invalid field: {invalid.field}", invalid.detail, field=invalid.field)

        if method == "POST":
            # What the write-route coverage (receipts/coverage.py) names as its protection: every
            # write of this API is a claim, a fenced settle or a keyed outbox message.
            wrapper.idempotency_protected_by = "idemdash's JSON API: each call is keyed or fenced"  # type: ignore[attr-defined]
        return wrapper

    return decorator


def _refuse_constant(name: str) -> Any:
    # NaN, Infinity and -Infinity: Python's parser takes them, but they are not JSON and
    # no database stores them.
    raise ValueError(f"{name} is not JSON")


def _check_depth(value: Any) -> None:
    # Deeper bodies would exhaust the recursion of canonicalisation: refuse them up front.
    limit = json_depth_limit()
    if nesting_depth(value) > limit:
        raise Invalid("body", f"JSON nested deeper than {limit} levels")


def _unstorable_text(value: Any) -> bool:
    if isinstance(value, str):
        # isascii() is O(1) in CPython: only non-ASCII strings are searched for a surrogate.
        return "\x00" in value or (not value.isascii() and SURROGATE.search(value) is not None)
    if isinstance(value, list):
        return any(_unstorable_text(item) for item in value)
    if isinstance(value, dict):
        return any(_unstorable_text(k) or _unstorable_text(v) for k, v in value.items())
    return False


def storable_text(body: dict, name: str) -> None:
    """Refuse the field `name` (any JSON) if a string in it, or an object's name, holds text
    no database stores. Checked per field, by the view, so that the answer names it."""
    if _unstorable_text(body.get(name)):
        # PostgreSQL text and jsonb cannot hold U+0000, and no database takes a lone UTF-16
        # surrogate (it is not Unicode text); refuse both on SQLite too, for one contract.
        raise Invalid(name, "Must not contain U+0000 or a lone UTF-16 surrogate (\\ud800 to \\udfff).")
