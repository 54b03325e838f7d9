"""Signature verification and event identity, per provider. Pure functions: bytes and
headers in, a VerifiedDelivery or a VerificationError (with a cause code) out.

Every check runs against each active secret of the endpoint, so a rotated secret and its
successor are both accepted while both are active. Error messages never contain a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import stripe
from standardwebhooks.webhooks import Webhook as StandardWebhook

from idemdash.core.canonical import json_depth_limit, nesting_depth

MAX_KEY_LENGTH = 500  # WebhookEvent.dedupe_key holds 512
MAX_DELIVERY_ID_LENGTH = 255  # WebhookDelivery.delivery_id
# C0 and C1 control characters and DEL: an id holding one (a CR/LF header injection, a NUL
# that PostgreSQL cannot store) is not an id any provider sends.
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class VerificationError(Exception):
    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause
        self.detail = detail


@dataclass(frozen=True)
class VerifiedDelivery:
    secret_index: int  # which of the given secrets verified it
    payload: Any
    dedupe_key: str
    event_type: str
    provider_event_id: str
    account: str
    # The provider's id of this one delivery where it has one besides the event's (Shopify's
    # X-Shopify-Webhook-Id): kept with the delivery, not part of the dedupe key.
    delivery_id: str = ""


def verify_delivery(
    provider: str,
    body: bytes,
    headers: Mapping[str, str],
    secrets: Sequence[str],
    *,
    stripe_tolerance: int = 300,
    standard_tolerance: int = 300,
    now: float | None = None,
) -> VerifiedDelivery:
    """`headers` must be case-insensitive (Django's request.headers is)."""
    if not secrets:
        raise VerificationError("no_active_secret", "The endpoint has no active secret.")
    now = time.time() if now is None else now
    if provider == "stripe":
        index = verify_stripe(body, headers, secrets, tolerance=stripe_tolerance, now=now)
        verified = _stripe_identity(index, _parse_json(body))
    elif provider == "shopify":
        index = verify_shopify(body, headers, secrets)
        verified = _shopify_identity(index, _parse_json(body), headers)
    elif provider == "standard":
        index = verify_standard(body, headers, secrets, tolerance=standard_tolerance, now=now)
        verified = _standard_identity(index, _parse_json(body), headers)
    else:
        raise ValueError(f"unknown provider {provider!r}")
    if len(verified.dedupe_key) > MAX_KEY_LENGTH:
        raise VerificationError("invalid_id", f"The event id is longer than {MAX_KEY_LENGTH} characters.")
    if len(verified.delivery_id) > MAX_DELIVERY_ID_LENGTH:
        raise VerificationError("invalid_id", f"The delivery id is longer than {MAX_DELIVERY_ID_LENGTH} characters.")
    if CONTROL_CHARACTERS.search(verified.dedupe_key + verified.delivery_id):
        raise VerificationError("invalid_id", "The event id contains control characters.")
    return verified


# --- Stripe ----------------------------------------------------------------------------------


def verify_stripe(
    body: bytes, headers: Mapping[str, str], secrets: Sequence[str], *, tolerance: int, now: float
) -> int:
    header = headers.get("Stripe-Signature", "")
    if not header:
        raise VerificationError("missing_header", "Stripe-Signature header is missing.")
    # The stripe library folds every failure into one exception type; the header is parsed
    # here first only to tell the causes apart for the rejection log.
    fields: dict[str, list[str]] = {}
    for item in header.split(","):
        name, sep, value = item.strip().partition("=")
        if sep:
            fields.setdefault(name, []).append(value)
    try:
        timestamp = int(fields["t"][0])
    except (KeyError, ValueError):
        raise VerificationError("malformed_header", "Stripe-Signature has no valid t= timestamp.") from None
    if not fields.get("v1"):
        raise VerificationError("malformed_header", "Stripe-Signature has no v1= signature.")
    _check_age(timestamp, now, tolerance)
    payload = _utf8(body)
    for index, secret in enumerate(secrets):
        try:
            stripe.WebhookSignature.verify_header(payload, header, secret, tolerance)
        except stripe.SignatureVerificationError:
            continue
        return index
    raise VerificationError("no_matching_signature", "No v1 signature matches an active secret.")


def _stripe_identity(index: int, payload: Any) -> VerifiedDelivery:
    if not isinstance(payload, dict) or not isinstance(payload.get("id"), str) or not payload["id"]:
        raise VerificationError("missing_id", "The Stripe event has no id.")
    account = payload.get("account") if isinstance(payload.get("account"), str) else ""
    # Connect events are delivered once per connected account: the account is part of the key.
    key = f"{account}:{payload['id']}" if account else payload["id"]
    return VerifiedDelivery(
        secret_index=index,
        payload=payload,
        dedupe_key=key,
        event_type=str(payload.get("type") or ""),
        provider_event_id=payload["id"],
        account=account,
    )


# --- Shopify ---------------------------------------------------------------------------------


def shopify_signature(body: bytes, secret: str) -> str:
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def verify_shopify(body: bytes, headers: Mapping[str, str], secrets: Sequence[str]) -> int:
    given = headers.get("X-Shopify-Hmac-Sha256", "")
    if not given:
        raise VerificationError("missing_header", "X-Shopify-Hmac-Sha256 header is missing.")
    for index, secret in enumerate(secrets):
        if hmac.compare_digest(shopify_signature(body, secret).encode(), given.strip().encode()):
            return index
    raise VerificationError("no_matching_signature", "X-Shopify-Hmac-Sha256 matches no active secret.")


def _shopify_identity(index: int, payload: Any, headers: Mapping[str, str]) -> VerifiedDelivery:
    webhook_id = headers.get("X-Shopify-Webhook-Id", "").strip()
    event_id = headers.get("X-Shopify-Event-Id", "").strip()
    shop = headers.get("X-Shopify-Shop-Domain", "").strip().lower()
    if not webhook_id:
        raise VerificationError("missing_header", "X-Shopify-Webhook-Id header is missing.")
    if not shop:
        raise VerificationError("missing_header", "X-Shopify-Shop-Domain header is missing.")
    # Shopify's guidance: one X-Shopify-Event-Id on two webhooks is one event sent twice (a
    # retry keeps its webhook id, a second subscription to the topic sends another). Without
    # an event id (API versions before it), the webhook id is all there is.
    return VerifiedDelivery(
        secret_index=index,
        payload=payload,
        dedupe_key=f"{shop}:{event_id}" if event_id else f"{shop}:webhook:{webhook_id}",
        event_type=headers.get("X-Shopify-Topic", "").strip(),
        provider_event_id=event_id,
        account=shop,
        delivery_id=webhook_id,
    )


# --- Standard Webhooks -----------------------------------------------------------------------


def verify_standard(
    body: bytes, headers: Mapping[str, str], secrets: Sequence[str], *, tolerance: int, now: float
) -> int:
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        if not headers.get(name):
            raise VerificationError("missing_header", f"{name} header is missing.")
    try:
        timestamp = int(headers["webhook-timestamp"])
    except ValueError:
        raise VerificationError("malformed_header", "webhook-timestamp is not an integer.") from None
    _check_age(timestamp, now, tolerance)
    _utf8(body)
    wanted = {k: headers[k] for k in ("webhook-id", "webhook-timestamp", "webhook-signature")}
    for index, secret in enumerate(secrets):
        try:
            StandardWebhook(secret).verify(body, wanted, json_parse=False)
        except Exception:  # no match, or a malformed signature list or secret: not this secret
            continue
        return index
    raise VerificationError("no_matching_signature", "webhook-signature matches no active secret.")


def _standard_identity(index: int, payload: Any, headers: Mapping[str, str]) -> VerifiedDelivery:
    webhook_id = headers["webhook-id"].strip()
    event_type = payload.get("type") if isinstance(payload, dict) else None
    return VerifiedDelivery(
        secret_index=index,
        payload=payload,
        dedupe_key=webhook_id,
        event_type=str(event_type or ""),
        provider_event_id=webhook_id,
        account="",
    )


# --- shared ----------------------------------------------------------------------------------


def _check_age(timestamp: int, now: float, tolerance: int) -> None:
    if timestamp < now - tolerance:
        raise VerificationError("stale_timestamp", f"The signature timestamp is older than {tolerance} s.")
    if timestamp > now + tolerance:
        raise VerificationError("future_timestamp", f"The signature timestamp is more than {tolerance} s ahead.")


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        # JSON is UTF-8 (RFC 8259); said here, since the libraries would only fail to match.
        raise VerificationError("invalid_json", "The body is not UTF-8.") from None


def _parse_json(body: bytes) -> Any:
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: a body nested deeper than the parser goes must not become a 500.
        raise VerificationError("invalid_json", "The body is not valid JSON.") from None
    # Far deeper than any provider's events; deeper payloads cannot be fingerprinted or
    # stored (Python parses deeper JSON than it can encode again).
    limit = json_depth_limit()
    if nesting_depth(payload) > limit:
        raise VerificationError("invalid_json", f"The body is nested deeper than {limit} levels.")
    if payload is None:
        # Not an event, and the stored payload column cannot tell JSON null from no payload.
        raise VerificationError("invalid_json", "The body is JSON null, not an event.")
    return payload
