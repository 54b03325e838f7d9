"""GET /api/v1/idempotency: what a client may rely on before it retries: the key's header and
form, the longest wait, and each protected operation with its routes and policy
(docs/http-contract.md, "Asking what is protected")."""

from __future__ import annotations

import functools

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.cache import cache_control

from idemdash.core.jsonapi import read_only
from receipts import coverage, keys
from receipts.conf import policy_for, setting
from receipts.decorators import EXPIRES_HEADER

# What of an operation's policy a caller is told: not which settings pattern matched it.
POLICY_FIELDS = ("ttl_seconds", "lease_seconds", "on_failure", "after_crash", "fresh_key")


@functools.cache
def _protected_routes(urlconf: str) -> tuple[coverage.Route, ...]:
    # Read once per URLconf, not on every anonymous request.
    return tuple(r for r in coverage.routes(urlconf=urlconf) if r.operation)


def document() -> dict:
    by_operation: dict[str, list[dict[str, str]]] = {}
    for route in _protected_routes(settings.ROOT_URLCONF):
        by_operation.setdefault(route.operation, []).append({"method": route.method, "path": "/" + route.path})
    return {
        "header": keys.HEADER,
        "key": {"min_length": 1, "max_length": keys.MAX_LENGTH, "characters": "printable ASCII (0x20 to 0x7E)",
                "forms": ["bare", "structured-field string"]},
        "expires_header": EXPIRES_HEADER,
        "wait": {"header": "Prefer", "syntax": "wait=<seconds>", "max_seconds": int(setting("RECEIPTS_MAX_WAIT_SECONDS"))},
        "fresh_key_window_seconds": int(setting("RECEIPTS_FRESH_KEY_WINDOW_SECONDS")),
        "operations": [
            {"operation": operation, "routes": routes,
             **{name: value for name, value in policy_for(operation).as_dict().items() if name in POLICY_FIELDS}}
            for operation, routes in sorted(by_operation.items())
        ],
    }


# Public, as the OpenAPI description is: a caller asks before it has anything to retry.
@read_only("GET", "HEAD")
@cache_control(public=True, max_age=300)
def idempotency(request: HttpRequest) -> JsonResponse:
    return JsonResponse(document())


app_name = "advertise"
urlpatterns = [
    path("", idempotency, name="document"),
]
