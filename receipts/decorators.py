"""`@idempotent`: the Idempotency-Key HTTP contract for a Django view (docs/http-contract.md).

The claim commits before the view runs, so a duplicate sees it; the view and the receipt's
completion then commit in one transaction (`_run`). `_contract` is the contract as a
generator that yields where the view runs: `respond` drives it around a sync view,
`arespond` around an async one."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core.exceptions import (
    BadRequest,
    ImproperlyConfigured,
    PermissionDenied,
    RequestDataTooBig,
    SuspiciousOperation,
)
from django.db import InterfaceError, OperationalError, transaction
from django.http import Http404, HttpRequest, HttpResponseBase
from django.template.response import SimpleTemplateResponse
from django.utils.http import http_date

from idemdash_client.canonical import UnstorableJSON
from idemdash.core.problems import CONTENT_TYPE as PROBLEM_CONTENT_TYPE
from idemdash.core.problems import problem, problem_body
from idemdash_client import context
from idemdash_client.references import References
from receipts import keys, placement, responses, store
from receipts.conf import policy_for, setting
from receipts.downstream import running_claim
from receipts.fingerprint import fingerprint_http, is_json, parse_json_body
from receipts.models import Attempt, Receipt

log = logging.getLogger(__name__)

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REPLAYED_HEADER = "Idempotent-Replayed"
# When the receipt of the request's key expires: until then a retry with the key is answered from it.
EXPIRES_HEADER = "Idempotency-Key-Expires"

# Responses that depend on who asks or when, not on the request: the next attempt must run.
NOT_STORED_STATUSES = frozenset({401, 403, 408, 429})
# Exceptions Django itself turns into a 4xx: like a 401/403, not a failure of the operation.
CLIENT_ERROR_EXCEPTIONS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation)

STORED_REQUEST_TEXT_LIMIT = 4096

# What receipts.middleware answers with a 503: the connection was lost, not the operation.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)

View = Callable[..., HttpResponseBase]


@dataclass(frozen=True)
class Protection:
    """What a protected view asks for, fixed when it is decorated (scope None: `keys.default_scope`)."""

    operation: str
    required: bool = True
    scope: Callable[[HttpRequest], str] | None = None


class _RollBack(Exception):
    """Leaves the view's transaction without committing, carrying the response out."""

    def __init__(self, response: HttpResponseBase) -> None:
        self.response = response


def idempotent(
    operation: str,
    required: bool = True,
    *,
    scope: Callable[[HttpRequest], str] | None = None,
) -> Callable[[View], View]:
    """Run the view at most once per (scope, Idempotency-Key) and replay its response;
    `required=False` runs it normally without the header."""
    keys.validate_operation(operation)
    protection = Protection(operation, required, scope)

    def decorator(view: View) -> View:
        placement.refuse_ninja(view, operation, "receipts.decorators.idempotent")
        placement.refuse_view(view, operation)

        if iscoroutinefunction(view):
            # Django runs a coroutine function as an async view: the wrapper must be one too.
            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
                return await arespond(request, view, args, kwargs, protection)

            return _marked(async_wrapper, operation)

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            placement.refuse_dispatch(view, request, operation)
            return respond(request, view, args, kwargs, protection)

        return _marked(wrapper, operation)

    return decorator


def _marked(wrapper: View, operation: str) -> View:
    wrapper.idempotent_operation = operation  # type: ignore[attr-defined]
    wrapper._ninja_contribute_to_operation = [placement.ninja_operation_hook(operation)]  # type: ignore[attr-defined]
    return wrapper


def respond(request: HttpRequest, view: View, args: tuple, kwargs: dict, protection: Protection) -> HttpResponseBase:
    """The contract for one request to a protected sync view (receipts.drf calls it too)."""
    steps = _contract(request, args, kwargs, protection)
    running, answer = _step(steps.send, None)
    if not running:
        return answer
    try:
        response = view(request, *args, **kwargs)
        if inspect.isawaitable(response):
            close = getattr(response, "close", None)  # a coroutine never awaited warns unless closed
            if close is not None:
                close()
            raise placement.not_async(view, protection.operation)
    except BaseException as exc:  # the contract rolls back, settles, and raises it again
        return _step(steps.throw, exc)[1]
    return _step(steps.send, response)[1]


async def arespond(
    request: HttpRequest, view: Callable[..., Awaitable[HttpResponseBase]], args: tuple, kwargs: dict,
    protection: Protection,
) -> HttpResponseBase:
    """`respond` for an async view: its steps on the request's one sync thread, where Django's
    async ORM runs the view's queries too, so they commit or roll back with the receipt."""
    steps = _contract(request, args, kwargs, protection)
    running, answer = await _astep_whole(steps, steps.send, None)
    if not running:
        return answer
    try:
        response = await view(request, *args, **kwargs)
    except BaseException as exc:  # CancelledError too: a client gone mid-view rolls back
        return (await _astep(steps.throw, exc))[1]
    return (await _astep(steps.send, response))[1]


def _step(step: Callable[[Any], Any], value: Any) -> tuple[bool, HttpResponseBase | None]:
    """Resume the contract: (True, None) while it waits for the view, else (False, the response)."""
    try:
        step(value)
    except StopIteration as done:
        return False, done.value
    return True, None


# Thread-sensitive: the transaction a step opens is the one the view and the last step find.
_astep = sync_to_async(_step, thread_sensitive=True)


_UNSET = object()


async def _astep_whole(steps: Generator, step: Callable[[Any], Any], value: Any) -> tuple[bool, HttpResponseBase | None]:
    """_astep for the first step, awaited to its end when the request is cancelled meanwhile
    (its thread goes on regardless); if it claimed the key, the cancellation is thrown into
    the contract, which rolls back and gives the key back, before it is raised here."""
    # A task of its own, to be shielded; its context copied back, so the view sees receipts.current().
    stepped = contextvars.copy_context()
    pending = asyncio.get_running_loop().create_task(_astep(step, value), context=stepped)
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError as cancelled:
        running, _ = await pending
        if running:
            with contextlib.suppress(asyncio.CancelledError):
                await _astep(steps.throw, cancelled)
        raise
    finally:
        for var, set_to in stepped.items():
            if var.get(_UNSET) is not set_to:
                var.set(set_to)


def _contract(
    request: HttpRequest, args: tuple, kwargs: dict, protection: Protection
) -> Generator[None, HttpResponseBase, HttpResponseBase]:
    """The one copy of the contract: yields where the view runs and returns the response."""
    if request.method not in UNSAFE_METHODS:
        return (yield)
    raw = request.headers.get(keys.HEADER)
    if raw is None:
        if protection.required:
            return problem(400, "idempotency-key-missing", "Idempotency-Key header required",
                           f"{request.method} {request.path} needs an Idempotency-Key header.")
        return (yield)
    key = keys.parse_key(raw)
    if key is None:
        return problem(400, "idempotency-key-invalid", "Malformed Idempotency-Key",
                       'An Idempotency-Key is 1 to 255 printable ASCII characters, bare or as a quoted '
                       'structured-field string ("...").')
    return (yield from _handle(request, args, kwargs, protection, key))


def is_client_error(exc: BaseException) -> bool:
    """Raised by the view for a 4xx: Django's own, DRF's or Ninja's."""
    if isinstance(exc, CLIENT_ERROR_EXCEPTIONS):
        return True
    drf = sys.modules.get("rest_framework.exceptions")
    if drf is not None and isinstance(exc, drf.APIException) and 400 <= exc.status_code < 500:
        return True
    ninja = sys.modules.get("ninja.errors")
    return ninja is not None and (
        isinstance(exc, ninja.ValidationError) or isinstance(exc, ninja.HttpError) and 400 <= exc.status_code < 500
    )


def payload_too_large() -> HttpResponseBase:
    return problem(413, "payload-too-large", "Request body too large", "The body exceeds DATA_UPLOAD_MAX_MEMORY_SIZE.")


def _stored_request(request: HttpRequest, body: bytes, content_type: str, parsed: Any) -> dict[str, Any]:
    if is_json(parsed):
        stored_body = _without_nul(parsed)
    else:
        stored_body = body[:STORED_REQUEST_TEXT_LIMIT].decode("utf-8", "replace").replace("\x00", "\ufffd")
    return {
        "method": request.method,
        "path": request.get_full_path(),
        "content_type": content_type,
        "body": stored_body,
    }


def _without_nul(value: Any) -> Any:
    """PostgreSQL's jsonb refuses U+0000; the stored request is for people, so replace it."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [_without_nul(item) for item in value]
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    return value


def _handle(
    request: HttpRequest, args: tuple, kwargs: dict, protection: Protection, key: str
) -> Generator[None, HttpResponseBase, HttpResponseBase]:
    operation = protection.operation
    content_type = request.META.get("CONTENT_TYPE", "")
    try:
        body = request.body
        parsed = parse_json_body(body, content_type)  # parsed once: fingerprinted, then stored
        fingerprint = fingerprint_http(request.method, request.get_full_path(), body, content_type, parsed)
    except RequestDataTooBig:
        return payload_too_large()
    except UnstorableJSON as exc:
        return problem(400, "invalid-json", "JSON body cannot be stored", str(exc))
    principal = protection.scope(request) if protection.scope else keys.default_scope(request)
    user = getattr(request, "user", None)
    session = getattr(request, "session", None)

    wait = keys.parse_prefer_wait(request.headers.get("Prefer", ""))
    applied_wait = min(wait, int(setting("RECEIPTS_MAX_WAIT_SECONDS"))) if wait else 0

    result = store.claim(
        principal, key, operation, _stored_request(request, body, content_type, parsed), fingerprint=fingerprint,
        user_id=str(user.pk) if user is not None and user.is_authenticated else "",
        session_id=keys.session_reference(session.session_key) if session is not None else "",
        wait_seconds=applied_wait,
    )
    if result.owned:
        lease = policy_for(operation).lease.total_seconds()
        claimed = running_claim(result.receipt, result.token)
        response = yield from _run(request, args, kwargs, result.held, lease, claimed)
    else:
        response = _refusal(result)
    if applied_wait and not result.wait_refused:  # past the process's waiters: it did not wait
        response["Preference-Applied"] = f"wait={applied_wait}"
    # None for a permanent receipt, nor for a fresh-key retry, whose receipt is another key's.
    if result.receipt.expires_at is not None and result.outcome != Attempt.Outcome.FRESH_KEY_RETRY:
        response[EXPIRES_HEADER] = http_date(result.receipt.expires_at.timestamp())
    return response


REFUSAL_WORDS = responses.RefusalWords(
    in_progress_title="A request with this Idempotency-Key is in progress",
    in_progress_detail="Retry after the first attempt finishes; it will then be replayed.",
    reused_title="Idempotency-Key reused with a different request",
    reused_detail="This key was first used for {operation} with another method, path or body.",
)


def _refusal(result: store.ClaimResult) -> HttpResponseBase:
    refused = responses.refusal(result, REFUSAL_WORDS)
    if refused is not None:
        return refused
    receipt = result.receipt
    if receipt.status == Receipt.Status.COMPLETED or receipt.response_status is not None:
        response = responses.rebuild(receipt.response_status, receipt.response_content_type, receipt.response_body)
    else:
        response = problem(500, "previous-failure", "The first attempt with this Idempotency-Key failed", receipt.error)
    response[REPLAYED_HEADER] = "true"
    return response


def _run(
    request: HttpRequest,
    args: tuple,
    kwargs: dict,
    held: store.Held,
    lease: float,
    claimed: context.RunningClaim,
) -> Generator[None, HttpResponseBase, HttpResponseBase]:
    """The view and its settle in an atomic block of their own, so a failure rolls back the
    view's writes alone and is stored beside the claim. The lease is kept while the view runs;
    if it was lost anyway, completing raises StaleToken and the view's writes roll back."""
    # Under ATOMIC_REQUESTS nobody can take the uncommitted claim over, and a renewal would wait on it.
    claim_uncommitted = transaction.get_connection().in_atomic_block
    try:
        with transaction.atomic():
            # receipts.current() gives the view its claim (asgiref carries it to an async view).
            with (
                contextlib.nullcontext() if claim_uncommitted else store.kept(held, lease),
                context.running(claimed),
            ):
                response = _rendered(request, (yield), args, kwargs)  # the view runs here
            if response.streaming or response.status_code in NOT_STORED_STATUSES:
                # Streaming bodies are produced after we return, so they cannot be stored.
                reason = "streaming response" if response.streaming else f"HTTP {response.status_code}: not stored"
                store.give_back(held, reason)
                return response
            if response.status_code >= 500:
                raise _RollBack(response)
            store.complete(
                held,
                response_status=response.status_code,
                content_type=response.get("Content-Type", ""),
                body=responses.encode(response.content, responses.kept_headers(response)),
                references=claimed.references,
            )
            return response
    except store.StaleToken:
        lost = problem(409, "lease-lost", "The lease on this Idempotency-Key was lost",
                       "The request took longer than its lease and another attempt took over; nothing this "
                       "attempt wrote was kept. Retry to get the other attempt's result.")
        # The rollback took the store's record of the refusal with the view's writes.
        store.lease_lost(held, "lease lost while the view ran; its writes were rolled back")
        return lost
    except _RollBack as rollback:
        response = rollback.response
        _fail(held, f"HTTP {response.status_code}", response, claimed.references)
        return response
    except (ImproperlyConfigured, asyncio.CancelledError) as exc:
        # Not the operation's failure: a misplaced decorator, or a client gone mid-view.
        _release_quietly(held, f"{type(exc).__name__}: not stored")
        raise
    except DATABASE_UNAVAILABLE as exc:
        # Not the operation's failure: a 503, nothing stored (failing would store a 500, or burn the key).
        _release_quietly(held, f"{type(exc).__name__}: database unavailable")
        raise
    except Exception as exc:
        if is_client_error(exc):
            _release_quietly(held, f"{type(exc).__name__}: not stored")
            raise
        body = problem_body(
            500, "internal-error", "Internal server error", "The first attempt with this Idempotency-Key raised an error."
        )
        error = f"{type(exc).__name__}: {exc}"
        _fail(held, error, None, claimed.references, body=body)
        raise


def _rendered(request: HttpRequest, response: HttpResponseBase, args: tuple, kwargs: dict) -> HttpResponseBase:
    """A TemplateResponse (and DRF's Response) rendered now, to be stored; a DRF Response gets
    its renderer from the APIView's finalize_response, which DRF calls again harmlessly."""
    if not isinstance(response, SimpleTemplateResponse) or response.is_rendered:
        return response
    api_view = (getattr(request, "parser_context", None) or {}).get("view")
    if api_view is not None and getattr(response, "accepted_renderer", None) is None:
        response = api_view.finalize_response(request, response, *args, **kwargs)
    return response.render()


def _fail(
    held: store.Held, error: str, response: HttpResponseBase | None, references: References, *, body: str = ""
) -> None:
    if response is not None:
        stored = {"response_status": response.status_code, "content_type": response.get("Content-Type", ""),
                  "body": responses.encode(response.content, responses.kept_headers(response))}
    else:
        stored = {"response_status": 500, "content_type": PROBLEM_CONTENT_TYPE, "body": body}
    try:
        store.fail(held, error=error, references=references, **stored)
    except store.StaleToken:
        log.info("receipt %s/%s was taken over before its failure could be recorded", held.scope, held.key)


def _release_quietly(held: store.Held, reason: str) -> None:
    try:
        store.give_back(held, reason)
    except store.StaleToken:
        log.info("receipt %s/%s was taken over before it could be released", held.scope, held.key)
    except DATABASE_UNAVAILABLE:
        log.warning("receipt %s/%s not released: database unavailable; its lease will run out", held.scope, held.key)
