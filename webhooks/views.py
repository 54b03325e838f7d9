from __future__ import annotations

import logging
from typing import Any

from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from idemdash_client.canonical import UnstorableJSON
from idemdash.core import tracing
from idemdash.core.problems import problem
from webhooks import endpoints
from webhooks.conf import setting
from webhooks.models import WebhookEndpoint
from webhooks.receive import record_rejection, store_delivery
from webhooks.verify import VerificationError, verify_delivery

log = logging.getLogger(__name__)

DATABASE_DOWN = (OperationalError, InterfaceError)


def _unavailable() -> HttpResponse:
    # Never a 2xx for a delivery that was not stored: the provider must retry it.
    return problem(
        503,
        "database-unavailable",
        "Webhook storage unavailable",
        "The delivery was not stored; retry later.",
        headers={"Retry-After": "30"},
    )


def _read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The raw body, or None when it is over the limit (checked before reading it all)."""
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return None
    body = request.read(limit + 1)
    return None if len(body) > limit else body


def _reject(endpoint: WebhookEndpoint, cause: str, detail: str, body: bytes, request: HttpRequest, **kw) -> None:
    try:
        record_rejection(
            endpoint, endpoint.provider, cause, detail, body, remote_addr=request.META.get("REMOTE_ADDR", ""), **kw
        )
    except DATABASE_DOWN:
        log.warning("could not record a rejected %s delivery: database unavailable", endpoint.provider)


RECEIVE_SPAN = "idemdash.webhook.receive"


@csrf_exempt
def receive(request: HttpRequest, slug: str) -> HttpResponse:
    with tracing.span(RECEIVE_SPAN) as span:
        response = _receive(request, slug, span)
        span.set_attribute("http.response.status_code", response.status_code)
        return response


# What the write-route coverage (receipts/coverage.py) names as this route's protection.
receive.idempotency_protected_by = "webhook deduplication: a delivery is stored once per event"  # type: ignore[attr-defined]


def _receive(request: HttpRequest, slug: str, span: Any) -> HttpResponse:
    try:
        endpoints.ensure_env_endpoints_once()
        found = endpoints.receiving(slug)
    except DATABASE_DOWN:
        return _unavailable()
    if found is None:
        return problem(404, "webhook-endpoint-not-found", "Unknown webhook endpoint", f"No endpoint {slug!r}.")
    if request.method != "POST":
        return problem(
            405, "method-not-allowed", "Method not allowed", "Deliver webhooks with POST.", headers={"Allow": "POST"}
        )
    endpoint, secrets = found
    span.set_attribute("idemdash.webhook.provider", endpoint.provider)

    limit = setting("WEBHOOKS_MAX_BODY_BYTES")
    body = _read_body(request, limit)
    if body is None:
        size = int(request.META.get("CONTENT_LENGTH") or 0)
        _reject(endpoint, "body_too_large", f"The body is over {limit} bytes.", b"", request, body_size=size)
        return problem(413, "payload-too-large", "Body too large", f"A delivery may be at most {limit} bytes.")

    try:
        verified = verify_delivery(
            endpoint.provider,
            body,
            request.headers,
            [secret for _, secret in secrets],
            stripe_tolerance=setting("WEBHOOKS_STRIPE_TOLERANCE"),
        )
    except VerificationError as exc:
        _reject(endpoint, exc.cause, exc.detail, body, request)
        return problem(400, "webhook-rejected", "Webhook delivery rejected", exc.detail, cause=exc.cause)

    try:
        stored = store_delivery(endpoint, verified, secrets[verified.secret_index][0])
    except (DataError, UnstorableJSON):
        # JSON the database refuses (PostgreSQL jsonb has no \u0000) or that cannot be
        # encoded again (a lone surrogate, a number read as infinity): a client error.
        detail = "The payload cannot be stored (a \\u0000 or a lone surrogate such as \\ud800 in a string, or NaN)."
        _reject(endpoint, "unstorable_payload", detail, body, request)
        return problem(400, "webhook-rejected", "Webhook delivery rejected", detail, cause="unstorable_payload")
    except DATABASE_DOWN:
        log.warning("webhook delivery to %r not stored: database unavailable", slug)
        return _unavailable()

    if span.is_recording():
        span.set_attributes({"idemdash.webhook.event_id": stored.event_id, "idemdash.webhook.duplicate": not stored.created})
    if stored.created:
        return JsonResponse({"received": True, "event": stored.event_id, "status": stored.status})
    return JsonResponse(
        {
            "duplicate": True,
            "event": stored.event_id,
            "status": stored.status,
            "deliveries": stored.delivery_count,
            "payload_matches": stored.payload_matches,
        }
    )
