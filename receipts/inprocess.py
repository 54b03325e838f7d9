"""The in-process API: run a step once per key from code inside the Django project (a task,
a management command, an agent's tool), on the store directly, with the HTTP client's
semantics, names and errors (idemdash_client/client.py:IdempotencyClient.run_once).

    result = receipts.run_once(f"welcome:{user.pk}", "email.send", send_welcome, user.pk)

Keys and operations are checked here, at its front door, by receipts/keys.py, as the JSON API
and the view decorator check theirs, so each takes exactly what the other does."""

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

# The scope of in-process callers that name none. A view's receipts are under `user:<pk>`
# and the like, an HTTP client's under `client:<name>`: pass that scope to share its keys.
DEFAULT_SCOPE = "inprocess"

# As the HTTP client's defaults: how long one claim waits for a running first attempt, how
# many times a caller still refused claims again, and the longest pause between.
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
    the stored result. `request` is what the key stands for (fingerprinted: reusing the key
    for another request raises IdempotencyKeyReused). fn's result must be JSON, or what `encoder`
    makes JSON; a replay returns the JSON as stored (a DjangoJSONEncoder's Decimal comes
    back as its string).

    If fn raises, the receipt fails as the operation's policy says (RECEIPTS_OPERATIONS
    `on_failure`: retried by the next call, or burned: PreviousFailure) and the error is
    raised again. While another caller runs the key this waits for its result, then raises
    RequestInProgress. A repeat after the operation's compaction window (`compact_after_seconds`,
    receipts/compaction.py) raises ReceiptCompacted: fn ran, its stored result was dropped,
    and fn is not run again. While fn runs, its lease is renewed (receipts/store.py:kept) and
    receipts.current() gives the claim and its downstream key."""
    fingerprint = _check(key, operation, scope, request, encoder)
    if iscoroutinefunction(fn):
        raise TypeError(f"{fn!r} is async: await receipts.arun_once(...) instead.")
    result = _claim_patiently(scope, key, operation, request, fingerprint, lease_seconds)
    if not result.owned:
        return _not_run(result)
    held = result.held
    # Inside the caller's transaction the claim is not committed while fn runs: a renewal
    # from another connection would wait on its row (as the view decorator's under
    # ATOMIC_REQUESTS), so it is not kept.
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
    """run_once for async code: fn may be `async def` (awaited on the event loop) or plain
    (run by sync_to_async, as Django runs sync code from async). The store's work runs by
    sync_to_async too, and a caller that finds another attempt running waits for it on the
    event loop (store.aclaim: woken when it settles, as run_once is), so the event loop never
    waits on the database or the first attempt."""
    fingerprint = _check(key, operation, scope, request, encoder)
    result = None
    for attempt in range(IN_PROGRESS_RETRIES + 1):
        result = await store.aclaim(
            scope, key, operation, request, fingerprint=fingerprint, lease_seconds=lease_seconds,
            wait_seconds=WAIT_SECONDS,
        )
        if result.outcome != Attempt.Outcome.IN_PROGRESS or attempt == IN_PROGRESS_RETRIES:
            break
        await asyncio.sleep(patience(attempt, result.retry_after, MAX_BACKOFF))
    assert result is not None
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
    """Decorator form of run_once (arun_once for an `async def`), for task functions;
    `key` (and `request`) get the function's arguments:

        @receipts.once("email.send", key=lambda user_id, **_: f"welcome:{user_id}")
        def send_welcome(user_id): ...

    The operation, scope and encoder are checked here, once, when the module is imported."""
    keys.validate_operation(operation)
    _check_scope(scope)
    _check_encoder(encoder)

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        def claim_of(args: tuple, kwargs: dict) -> dict[str, Any]:
            return {
                "request": request(*args, **kwargs) if request else None,
                "scope": scope,
                "lease_seconds": lease_seconds,
                "encoder": encoder,
            }

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


# --- the steps both run_once and arun_once take ---------------------------------------------


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


def _claim_patiently(
    scope: str, key: str, operation: str, request: Any, fingerprint: str, lease_seconds: int | None
) -> store.ClaimResult:
    """Claim, waiting for a running first attempt (woken when it completes), and claim again
    as the HTTP client does when still refused, up to IN_PROGRESS_RETRIES times."""
    for attempt in range(IN_PROGRESS_RETRIES + 1):
        result = store.claim(
            scope, key, operation, request, fingerprint=fingerprint, lease_seconds=lease_seconds,
            wait_seconds=WAIT_SECONDS,
        )
        if result.outcome != Attempt.Outcome.IN_PROGRESS or attempt == IN_PROGRESS_RETRIES:
            return result
        time.sleep(patience(attempt, result.retry_after, MAX_BACKOFF))
    raise AssertionError("unreachable")  # pragma: no cover


def _lease(result: store.ClaimResult) -> float:
    # Every claim sets updated_at to its moment and the lease to end the lease after it.
    receipt = result.receipt
    return (receipt.lease_expires_at - receipt.updated_at).total_seconds()


def _not_run(result: store.ClaimResult) -> Any:
    """The stored result of a replay; otherwise the error the HTTP client raises, carrying
    the problem the JSON API answers for the same claim."""
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
        # An outcome this function does not know yet must not pass for a replay of nothing.
        raise IdempotencyError(f"the claim of {receipt.key!r} was answered {result.outcome!r}")
    if receipt.status == Receipt.Status.FAILED:
        raise PreviousFailure.failed(receipt.key, receipt.error, api.stored_response(receipt))
    return api.stored_response(receipt)


def _stored(value: Any, encoder: type[json.JSONEncoder] | None, operation: str) -> str:
    """The text a receipt keeps for fn's result, refused (TypeError, ValueError) before
    anything is stored when it is not JSON."""
    try:
        body = json.dumps(value, cls=encoder, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"The result of {operation!r} cannot be stored: {exc}; {ENCODER_HINT}.") from exc
    # ASCII (json.dumps escapes the rest), so any text column takes it, U+0000 included.
    return body


def _complete(held: store.Held, body: str, references: References) -> None:
    try:
        store.complete(held, content_type="application/json", body=body, references=references)
    except store.StaleToken:
        problem = json.loads(api.stale_token(held.key).content)
        raise StaleToken(409, problem) from None


def _settle_failed(held: store.Held, exc: BaseException, references: References) -> None:
    """fn raised (or its result could not be stored): fail the receipt as the operation's
    policy says. Cancelled or interrupted (CancelledError, KeyboardInterrupt, SystemExit) is
    not the operation's failure: the key is given back, as the view decorator does."""
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
