"""The in-process API: run a step once per key from code inside the Django project, on the
store directly, with the HTTP client's semantics, names and errors
(idemdash_client/client.py:IdempotencyClient.run_once).

    result = receipts.run_once(f"welcome:{user.pk}", "email.send", send_welcome, user.pk)"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.db import DatabaseError, transaction

from idemdash.core.canonical import fingerprint_json
from idemdash_client import context
from idemdash_client.canonical import UnstorableJSON
from idemdash_client.client import patience
from idemdash_client.references import References
from idemdash_client.errors import (
    IdempotencyError,
    FreshKeyRetry,
    IdempotencyKeyReused,
    OutcomeUnknown,
    PreviousFailure,
    ReceiptCompacted,
    RequestInProgress,
    StaleToken,
)
from receipts import api, keys, responses, store
from receipts.downstream import running_claim
from receipts.models import Attempt, Receipt

log = logging.getLogger(__name__)

# The scope of in-process callers that name none; pass a view's or a client's to share its keys.
DEFAULT_SCOPE = "inprocess"

# As the HTTP client's: one claim's wait for a running first attempt, the claims again, the longest pause.
WAIT_SECONDS = 5.0
IN_PROGRESS_RETRIES = 5
MAX_BACKOFF = 10.0

ENCODER_HINT = (
    "return JSON (dict, list, str, int, float, bool, None), or pass encoder= a json.JSONEncoder "
    "subclass that turns the result into JSON (such as django.core.serializers.json.DjangoJSONEncoder)"
)


def run_once(
    key: str,
    operation: str,
    fn: Callable[..., Any],
    *args: Any,
    request: Any = None,
    scope: str = DEFAULT_SCOPE,
    lease_seconds: int | None = None,
    encoder: type[json.JSONEncoder] | None = None,
    **kwargs: Any,
) -> Any:
    """Run fn(*args, **kwargs) once for (scope, key) and return its result; a repeat returns
    the stored JSON (`encoder` makes a result JSON). `request` is what the key stands for:
    reused for another, IdempotencyKeyReused. If fn raises, the receipt fails as its policy
    says and the error is raised again; while another caller runs the key this waits, then
    raises RequestInProgress (docs/agents-and-workers.md has every error)."""
    fingerprint = _check(key, operation, scope, request, encoder)
    if iscoroutinefunction(fn):
        raise TypeError(f"{fn!r} is async: await receipts.arun_once(...) instead.")
    claiming = {"fingerprint": fingerprint, "lease_seconds": lease_seconds, "wait_seconds": WAIT_SECONDS}
    for attempt in range(IN_PROGRESS_RETRIES + 1):
        result = store.claim(scope, key, operation, request, **claiming)
        if (pause := _pause(attempt, result)) is None:
            break
        time.sleep(pause)
    if not result.owned:
        return _not_run(result)
    held = result.held
    # Inside the caller's transaction a renewal from another connection would wait on the row.
    uncommitted = transaction.get_connection().in_atomic_block
    keep = contextlib.nullcontext() if uncommitted else store.kept(held, _lease(result))
    claimed = running_claim(result.receipt, held.token)
    try:
        with keep, context.running(claimed):
            value = fn(*args, **kwargs)
        body = _stored(value, encoder, operation)
    except BaseException as exc:
        _settle_failed(held, exc, claimed.references)
        raise
    _complete(held, body, claimed.references)
    return value


async def arun_once(
    key: str,
    operation: str,
    fn: Callable[..., Any],
    *args: Any,
    request: Any = None,
    scope: str = DEFAULT_SCOPE,
    lease_seconds: int | None = None,
    encoder: type[json.JSONEncoder] | None = None,
    **kwargs: Any,
) -> Any:
    """run_once for async code: fn may be `async def` or plain; nothing blocks the event loop."""
    fingerprint = _check(key, operation, scope, request, encoder)
    claiming = {"fingerprint": fingerprint, "lease_seconds": lease_seconds, "wait_seconds": WAIT_SECONDS}
    for attempt in range(IN_PROGRESS_RETRIES + 1):
        result = await store.aclaim(scope, key, operation, request, **claiming)
        if (pause := _pause(attempt, result)) is None:
            break
        await asyncio.sleep(pause)
    if not result.owned:
        return _not_run(result)
    held = result.held
    claimed = running_claim(result.receipt, held.token)
    try:
        with store.kept(held, _lease(result)), context.running(claimed):
            if iscoroutinefunction(fn):
                value = await fn(*args, **kwargs)
            else:
                value = await sync_to_async(fn)(*args, **kwargs)
                if inspect.isawaitable(value):
                    value = await value
        body = _stored(value, encoder, operation)
    except BaseException as exc:
        await sync_to_async(_settle_failed)(held, exc, claimed.references)
        raise
    await sync_to_async(_complete)(held, body, claimed.references)
    return value


def once(
    operation: str,
    *,
    key: Callable[..., str],
    request: Callable[..., Any] | None = None,
    scope: str = DEFAULT_SCOPE,
    lease_seconds: int | None = None,
    encoder: type[json.JSONEncoder] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator form of run_once (arun_once for an `async def`); `key` (and `request`) get
    the function's arguments. The operation, scope and encoder are checked at decoration:

        @receipts.once("email.send", key=lambda user_id, **_: f"welcome:{user_id}")"""
    keys.validate_operation(operation)
    _check_scope(scope)
    _check_encoder(encoder)

    options = {"scope": scope, "lease_seconds": lease_seconds, "encoder": encoder}

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        def claim_of(args: tuple, kwargs: dict) -> dict[str, Any]:
            return {**options, "request": request(*args, **kwargs) if request else None}

        if iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                return await arun_once(key(*args, **kwargs), operation, fn, *args, **claim_of(args, kwargs), **kwargs)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return run_once(key(*args, **kwargs), operation, fn, *args, **claim_of(args, kwargs), **kwargs)

        return wrapper

    return decorator


def _check(key: Any, operation: Any, scope: Any, request: Any, encoder: Any) -> str:
    """Refuse bad input before anything is claimed; return the request's fingerprint."""
    keys.validate_key(key)
    keys.validate_operation(operation)
    _check_scope(scope)
    _check_encoder(encoder)
    try:
        return fingerprint_json(request)
    except (UnstorableJSON, TypeError) as exc:
        raise ValueError(f"request= must be JSON, as it is stored with the receipt: {exc}") from None


def _check_scope(scope: Any) -> None:
    # The column's length; any text otherwise, as a view's scope function may return.
    if not isinstance(scope, str) or not 1 <= len(scope) <= 255:
        raise ValueError("A scope is a string of 1 to 255 characters.")


def _check_encoder(encoder: Any) -> None:
    if encoder is not None and not (isinstance(encoder, type) and issubclass(encoder, json.JSONEncoder)):
        raise TypeError(f"encoder= must be a json.JSONEncoder subclass, got {encoder!r}")


def _pause(attempt: int, result: store.ClaimResult) -> float | None:
    """How long to wait before claiming again, as the HTTP client does; None: this claim answers."""
    if result.outcome != Attempt.Outcome.IN_PROGRESS or attempt == IN_PROGRESS_RETRIES:
        return None
    return patience(attempt, result.retry_after, MAX_BACKOFF)


def _lease(result: store.ClaimResult) -> float:
    # A claim sets updated_at and the lease's end together.
    receipt = result.receipt
    return (receipt.lease_expires_at - receipt.updated_at).total_seconds()


def _not_run(result: store.ClaimResult) -> Any:
    """The stored result of a replay; otherwise the HTTP client's error, with the JSON API's problem."""
    receipt = result.receipt
    refused = responses.refusal(result, api.CLAIM_REFUSAL_WORDS)
    if refused is not None:
        problem = json.loads(refused.content)
        if result.outcome == Attempt.Outcome.IN_PROGRESS:
            raise RequestInProgress(refused.status_code, problem, result.retry_after)
        if result.outcome == Attempt.Outcome.OUTCOME_UNKNOWN:
            raise OutcomeUnknown(refused.status_code, problem)
        if result.outcome == Attempt.Outcome.FRESH_KEY_RETRY:
            raise FreshKeyRetry(refused.status_code, problem)
        if result.outcome == Attempt.Outcome.REPLAYED:  # compacted: the operation ran, its result is gone
            raise ReceiptCompacted(refused.status_code, problem)
        raise IdempotencyKeyReused(refused.status_code, problem)
    if result.outcome != Attempt.Outcome.REPLAYED:
        raise IdempotencyError(f"the claim of {receipt.key!r} was answered {result.outcome!r}")
    if receipt.status == Receipt.Status.FAILED:
        raise PreviousFailure.failed(receipt.key, receipt.error, api.stored_response(receipt))
    return api.stored_response(receipt)


def _stored(value: Any, encoder: type[json.JSONEncoder] | None, operation: str) -> str:
    """The text a receipt keeps for fn's result (ASCII: any text column takes it), or TypeError."""
    try:
        return json.dumps(value, cls=encoder, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"The result of {operation!r} cannot be stored: {exc}; {ENCODER_HINT}.") from exc


def _complete(held: store.Held, body: str, references: References) -> None:
    try:
        store.complete(held, content_type="application/json", body=body, references=references)
    except store.StaleToken:
        problem = json.loads(api.stale_token(held.key).content)
        raise StaleToken(409, problem) from None


def _settle_failed(held: store.Held, exc: BaseException, references: References) -> None:
    """fn raised: fail the receipt, or give the key back when cancelled or interrupted."""
    error = f"{type(exc).__name__}: {exc}"[:2000]
    try:
        if isinstance(exc, Exception):
            store.fail(held, error=error, references=references)
        else:
            store.give_back(held, f"{error}: not stored")
    except store.StaleToken:
        log.info("receipt %s/%s was taken over before its failure could be recorded", held.scope, held.key)
    except DatabaseError as db_error:  # the original error matters more; the lease will lapse
        log.warning("receipt %s/%s not settled (%s); its lease will run out", held.scope, held.key, db_error)
