"""The JSON API (docs/json-api.md): receipts for callers that are not Django views. The
token's API client is the scope. The front door (`idemdash.core.jsonapi`) checks method,
token, media type, size and JSON; the fields are checked here, all before the store is called."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from idemdash.core.canonical import fingerprint_json
from idemdash_client.canonical import UnstorableJSON
from idemdash.core.clients import ApiClient
from idemdash.core.jsonapi import Invalid, json_api, storable_text
from idemdash.core.problems import problem
from idemdash.core.reference_rows import listed
from idemdash_client.references import InvalidReference, validate_all
from receipts import keys, responses, store
from receipts.conf import policy_for, setting
from receipts.downstream import downstream_key
from receipts.models import Receipt

CLAIM_FIELDS = {"key", "operation", "request", "lease_seconds", "wait_seconds"}
COMPLETE_FIELDS = {"key", "token", "response", "references"}
FAIL_FIELDS = {"key", "token", "error", "retryable", "references"}
HEARTBEAT_FIELDS = {"key", "token", "lease_seconds"}


def _fields(body: dict, allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise Invalid(unknown[0], f"Unknown field; allowed: {', '.join(sorted(allowed))}")
    for name in sorted(required):
        if name not in body:
            raise Invalid(name, "Required.")


def _key(body: dict) -> str:
    try:
        return keys.validate_key(body["key"])
    except keys.InvalidKey as exc:
        raise Invalid("key", str(exc)) from None


def _integer(body: dict, name: str, minimum: int, maximum: int) -> int:
    value = body[name]
    # bool is a subclass of int in Python; `true` is not a number of seconds or a token.
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise Invalid(name, f"An integer from {minimum} to {maximum}.")
    return value


def _number(body: dict, name: str, minimum: float, maximum: float) -> float:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= maximum:
        raise Invalid(name, f"A number from {minimum} to {maximum}.")
    return float(value)


def _lease_seconds(body: dict) -> int | None:
    """The lease a caller asks for, or None for the operation's."""
    if "lease_seconds" not in body:
        return None
    return _integer(body, "lease_seconds", setting("RECEIPTS_MIN_LEASE_SECONDS"), setting("RECEIPTS_MAX_LEASE_SECONDS"))


def _iso(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def stored_response(receipt: Receipt) -> Any:
    """A receipt's stored result: the JSON it was, else the text."""
    if not receipt.response_body:
        return None
    if "json" in receipt.response_content_type:
        with contextlib.suppress(ValueError):
            return json.loads(receipt.response_body)
    return receipt.response_body


def receipt_json(receipt: Receipt) -> dict[str, Any]:
    """The public view of a receipt; never the fencing token, handed only to the caller that claimed."""
    return {
        "key": receipt.key,
        "scope": receipt.scope,
        "operation": receipt.operation,
        "status": receipt.status,
        "retryable": receipt.retryable,
        "attempts": receipt.attempts,
        "fingerprint": receipt.fingerprint,
        "request": receipt.request,
        "response": stored_response(receipt),
        "response_status": receipt.response_status,
        "error": receipt.error,
        "lease_expires_at": _iso(receipt.lease_expires_at),
        "created_at": _iso(receipt.created_at),
        "updated_at": _iso(receipt.updated_at),
        "completed_at": _iso(receipt.completed_at),
        "expires_at": _iso(receipt.expires_at),
        "permanent": receipt.permanent,
        "compacted_at": _iso(receipt.compacted_at),
        "policy": policy_for(receipt.operation).as_dict(),
        "references": listed(receipt.references.order_by("created_at", "pk")),
    }


def references_field(body: dict) -> list[tuple[str, str]]:
    """The optional `references` of a body, each checked (idemdash_client.references)."""
    given = body.get("references", [])
    if not isinstance(given, list):
        raise Invalid("references", 'A list of {"kind": ..., "value": ...} objects.')
    try:
        return validate_all(given)
    except InvalidReference as exc:
        raise Invalid("references", f"{exc.field}: {exc}") from None


def _not_found(key: str) -> HttpResponse:
    return problem(404, "receipt-not-found", "No such receipt", f"This client has no receipt with key {key!r}.")


def stale_token(key: str) -> HttpResponse:
    return problem(409, "stale-token", "Token no longer owns this receipt",
                   f"The lease on {key!r} was taken over or the receipt was settled; this attempt's result was not stored.")


def _settle(client: ApiClient, key: str, token: int, run: Callable[[store.Held], Any]) -> HttpResponse:
    """Run `run` with the caller's hold and answer with what it returns, or the receipt: 404 for
    a key this client does not have (looked up first, so no attempt row is written), 409 for a
    token that no longer owns it."""
    if not Receipt.objects.filter(scope=client.scope, key=key).exists():
        return _not_found(key)
    try:
        answer = run(store.Held(client.scope, key, token))
    except store.StaleToken:
        return stale_token(key)
    return JsonResponse(answer or receipt_json(Receipt.objects.get(scope=client.scope, key=key)))


CLAIM_REFUSAL_WORDS = responses.RefusalWords(
    in_progress_title="A claim on this key is in progress",
    in_progress_detail="Another worker holds the lease; retry after Retry-After seconds to get its result.",
    reused_title="Key reused with a different request",
    reused_detail="This key was first claimed for {operation} with another request.",
)


@json_api("POST")
def claim(request: HttpRequest, client: ApiClient, body: dict) -> HttpResponse:
    _fields(body, CLAIM_FIELDS, {"key", "operation"})
    key = _key(body)
    try:
        operation = keys.validate_operation(body["operation"])
    except keys.InvalidOperation as exc:
        raise Invalid("operation", str(exc)) from None
    lease_seconds = _lease_seconds(body)
    wait_seconds = _number(body, "wait_seconds", 0, setting("RECEIPTS_MAX_WAIT_SECONDS")) if "wait_seconds" in body else 0
    storable_text(body, "request")
    payload = body.get("request")
    try:
        fingerprint = fingerprint_json(payload)
    except UnstorableJSON as exc:  # a number read as infinity (1e400)
        raise Invalid("request", str(exc)) from None

    result = store.claim(client.scope, key, operation, payload, fingerprint=fingerprint, lease_seconds=lease_seconds,
                         wait_seconds=wait_seconds)
    receipt = result.receipt
    if result.owned:
        return JsonResponse(
            {
                "outcome": result.outcome,
                "key": key,
                "token": result.token,
                "lease_expires_at": _iso(receipt.lease_expires_at),
                "attempts": receipt.attempts,
                "expires_at": _iso(receipt.expires_at),
                "permanent": receipt.permanent,
                "policy": policy_for(receipt.operation).as_dict(),
                "scope": client.scope,
                "downstream_key": downstream_key(client.scope, key, receipt.created_at),
            },
            status=201,
        )
    refused = responses.refusal(result, CLAIM_REFUSAL_WORDS)
    if refused is not None:
        return refused
    data: dict[str, Any] = {
        "outcome": "replayed",
        "key": key,
        "status": receipt.status,
        "response": stored_response(receipt),
    }
    if receipt.status == Receipt.Status.FAILED:
        data["error"] = receipt.error
    return JsonResponse(data, headers={"Idempotent-Replayed": "true"})


@json_api("POST")
def complete(request: HttpRequest, client: ApiClient, body: dict) -> HttpResponse:
    _fields(body, COMPLETE_FIELDS, COMPLETE_FIELDS - {"references"})
    key = _key(body)
    token = _integer(body, "token", 1, 2**63 - 1)
    references = references_field(body)
    storable_text(body, "response")
    try:
        stored = json.dumps(body["response"], separators=(",", ":"), allow_nan=False)
    except ValueError:  # a number read as infinity (1e400): it would replay as `Infinity`, not JSON
        raise Invalid("response", "A number is beyond the range of a double.") from None
    return _settle(client, key, token, lambda held: store.complete(
        held, content_type="application/json", body=stored, references=references))


@json_api("POST")
def fail(request: HttpRequest, client: ApiClient, body: dict) -> HttpResponse:
    _fields(body, FAIL_FIELDS, {"key", "token", "error"})
    key = _key(body)
    token = _integer(body, "token", 1, 2**63 - 1)
    error = body["error"]
    if not isinstance(error, str) or not error.strip():
        raise Invalid("error", "A non-empty string saying what went wrong.")
    storable_text(body, "error")
    retryable = body.get("retryable")
    if retryable is not None and not isinstance(retryable, bool):
        raise Invalid("retryable", "true, false, or absent for the operation's policy.")
    references = references_field(body)
    return _settle(client, key, token, lambda held: store.fail(
        held, error=error, retryable=retryable, references=references))


@json_api("POST")
def heartbeat(request: HttpRequest, client: ApiClient, body: dict) -> HttpResponse:
    """Renew the lease of a running attempt (store.renew)."""
    _fields(body, HEARTBEAT_FIELDS, {"key", "token"})
    key = _key(body)
    token = _integer(body, "token", 1, 2**63 - 1)
    lease_seconds = _lease_seconds(body)
    return _settle(client, key, token, lambda held: {
        "key": key, "lease_expires_at": _iso(store.renew(held, lease_seconds=lease_seconds))})


@json_api("GET")
def receipt_detail(request: HttpRequest, client: ApiClient) -> HttpResponse:
    if "key" not in request.GET:
        return problem(400, "invalid-field", "Invalid field: key", "Pass ?key=<idempotency key>.", field="key")
    try:
        key = keys.validate_key(request.GET["key"])
    except keys.InvalidKey as exc:
        return problem(400, "invalid-field", "Invalid field: key", str(exc), field="key")
    receipt = Receipt.objects.filter(scope=client.scope, key=key).first()
    if receipt is None:
        return _not_found(key)
    return JsonResponse(receipt_json(receipt))
