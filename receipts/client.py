"""A Python client for the receipts JSON API, for workers and agents outside Django.

Imports no Django (tested): a worker needs only httpx and rfc8785.

    client = IdempotencyClient("http://127.0.0.1:8000", token)
    result = client.run_once(make_key("invoice", invoice_id), "invoice.send", send, invoice_id)

Keys must be derived from the intent's inputs (which invoice, which lead, which template),
never from the time of the call or a random value: a retry after a crash must produce the
same key, or it is a new intent and runs again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from idemdash.core.canonical import canonical_json
from receipts.context import RunningClaim, running

log = logging.getLogger(__name__)

_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,255}$")
MAX_KEY_LENGTH = 255


class IdempotencyError(Exception):
    pass


class ApiError(IdempotencyError):
    """The API answered with a problem (RFC 9457); `problem` is its parsed body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}".strip())

    @property
    def type(self) -> str:
        return str(self.problem.get("type", ""))


class InProgress(ApiError):
    """Another worker holds the lease on this key."""

    def __init__(self, status: int, problem: dict[str, Any], retry_after: int) -> None:
        super().__init__(status, problem)
        self.retry_after = retry_after


class KeyMismatch(ApiError):
    """The key was used before with a different request: a bug in how keys are made."""


class LeaseLost(ApiError):
    """Our token no longer owns the receipt (the lease expired and was taken over)."""


class OutcomeUnknown(ApiError):
    """The key's last attempt stopped before it settled and may have had its effect; its
    operation holds such keys (`after_crash: "hold"`) until a reconcile function or an
    operator resolves them. Retrying does not help until then."""


class PreviousFailure(IdempotencyError):
    """The key's first attempt failed and its operation burns keys on failure."""

    def __init__(self, key: str, error: str, response: Any) -> None:
        self.key = key
        self.error = error
        self.response = response
        super().__init__(f"{key!r} failed before and is not retried: {error}")


@dataclass(frozen=True)
class Claim:
    outcome: str
    key: str
    token: int | None = None
    lease_expires_at: str | None = None
    status: str | None = None
    response: Any = None
    error: str | None = None
    # The length of the lease a claim got (the one asked for, else the operation's): what
    # its heartbeats renew it for.
    lease_seconds: int | None = None
    # An owner's: what receipts.current() gives while run_once's fn runs.
    scope: str | None = None
    attempts: int | None = None
    downstream_key: str | None = None

    @property
    def replayed(self) -> bool:
        return self.outcome == "replayed"


def make_key(*parts: Any) -> str:
    """Parts joined with ':'. Too long or not printable ASCII: a readable prefix + sha256."""
    if not parts:
        raise ValueError("make_key needs at least one part")
    text = ":".join(str(part) for part in parts)
    if _PRINTABLE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    readable = re.sub(r"[^\x20-\x7e]", "_", text)[: MAX_KEY_LENGTH - len(digest) - 1]
    return f"{readable}:{digest}" if readable else digest


def tool_call_key(run_id: Any, tool_name: str, arguments: Any) -> str:
    """The key of an agent's tool call within one run or conversation (`run_id`): the same
    tool with the same arguments (in any key order) in the same run gives the same key.

    There is no unscoped form: a key that outlived its run would answer the same call in a
    new conversation with the old result, for as long as the receipt is kept."""
    return make_key(run_id, tool_name, hashlib.sha256(canonical_json(arguments)).hexdigest())


def patience(attempt: int, retry_after: float, max_backoff: float) -> float:
    """How long a caller refused with InProgress waits before its claim number `attempt + 1`
    (the HTTP client's and the in-process API's): Retry-After, or longer as the retries go
    on (1 s doubling, at most max_backoff), and up to a quarter more, so that a crowd of
    duplicates refused together neither comes back in the same instant nor keeps a busy
    server busier with refusals."""
    return max(retry_after, min(2.0**attempt, max_backoff)) * random.uniform(1.0, 1.25)


class IdempotencyClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        wait_seconds: float = 5.0,
        transport: httpx.BaseTransport | None = None,
        max_in_progress_retries: int = 5,
        max_unavailable_retries: int = 3,
        max_backoff: float = 10.0,
    ) -> None:
        self.wait_seconds = wait_seconds
        self.max_in_progress_retries = max_in_progress_retries
        self.max_unavailable_retries = max_unavailable_retries
        self.max_backoff = max_backoff
        # The server may hold a claim for wait_seconds: never time out before it answers.
        self._http = httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1/receipts/",
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout + wait_seconds,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> IdempotencyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the four endpoints ------------------------------------------------------------

    def claim(
        self,
        key: str,
        operation: str,
        request: Any = None,
        *,
        lease_seconds: int | None = None,
        wait_seconds: float | None = None,
    ) -> Claim:
        body: dict[str, Any] = {"key": key, "operation": operation, "request": request}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        wait = self.wait_seconds if wait_seconds is None else wait_seconds
        if wait:
            body["wait_seconds"] = wait
        data = self._post("claim", body)
        return Claim(
            outcome=data["outcome"],
            key=data["key"],
            token=data.get("token"),
            lease_expires_at=data.get("lease_expires_at"),
            status=data.get("status"),
            response=data.get("response"),
            error=data.get("error"),
            lease_seconds=lease_seconds or (data.get("policy") or {}).get("lease_seconds"),
            scope=data.get("scope"),
            attempts=data.get("attempts"),
            downstream_key=data.get("downstream_key"),
        )

    def complete(self, key: str, token: int, response: Any) -> dict[str, Any]:
        return self._post("complete", {"key": key, "token": token, "response": response})

    def fail(self, key: str, token: int, error: str, *, retryable: bool | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"key": key, "token": token, "error": error or "failed"}
        if retryable is not None:
            body["retryable"] = retryable
        return self._post("fail", body)

    def heartbeat(self, key: str, token: int, *, lease_seconds: int | None = None) -> dict[str, Any]:
        """Renew the lease of the attempt holding `token` for `lease_seconds` from now (the
        operation's lease when None). LeaseLost: the token no longer owns the receipt."""
        body: dict[str, Any] = {"key": key, "token": token}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return self._post("heartbeat", body)

    def get(self, key: str) -> dict[str, Any] | None:
        """The receipt, or None when this client has none with that key."""
        reply = self._send(lambda: self._http.get("", params={"key": key}))
        if reply.status_code == 404:
            return None
        return self._json(reply)

    # --- running work once -------------------------------------------------------------

    def run_once(
        self,
        key: str,
        operation: str,
        fn: Callable[..., Any],
        *args: Any,
        request: Any = None,
        lease_seconds: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run fn(*args, **kwargs) once for `key`: a repeat returns the stored result.

        `request` is what the key stands for (fingerprinted: reusing the key for another
        request raises KeyMismatch). fn's result must be JSON-serialisable; it is stored and
        returned to every later call. If fn raises, the receipt is marked failed (so the
        next call runs fn again, unless the operation burns keys) and the error re-raised.
        While another worker holds the key, waits up to `max_in_progress_retries` times,
        honouring Retry-After, then raises InProgress.

        While fn runs, a background thread renews the lease every third of its length (a
        heartbeat), so a step slower than its lease, or a server slow to take the
        completion, is not taken over. If a heartbeat is refused (the lease was lost anyway:
        an operator released the key, or the process stalled past the lease and another
        worker took over), fn cannot be stopped; when it returns its result is not stored
        and LeaseLost is raised, as it is when completing is refused.

        While fn runs, receipts.current() gives the claim, with the `downstream_key` the
        server handed out: the same for every attempt of this claim, for fn to send to a
        provider that honours idempotency keys.
        """
        claim, sent_at = self._claim_patiently(key, operation, request, lease_seconds)
        if claim.replayed:
            if claim.status == "failed":
                raise PreviousFailure(key, claim.error or "", claim.response)
            return claim.response
        assert claim.token is not None
        claimed = RunningClaim(
            key=key,
            scope=claim.scope or "",
            operation=operation,
            fencing_token=claim.token,
            attempt=claim.attempts or 1,
            downstream_key=claim.downstream_key or "",
        )
        try:
            with _Heartbeat(self, key, claim.token, claim.lease_seconds, sent_at) as beat, running(claimed):
                result = fn(*args, **kwargs)
            json.dumps(result)  # refuse what cannot be stored before claiming success
        except BaseException as exc:
            try:
                self.fail(key, claim.token, f"{type(exc).__name__}: {exc}"[:2000])
            except IdempotencyError:
                pass  # the original error matters more; the lease will lapse by itself
            raise
        if beat.lost is not None:
            raise beat.lost  # completing would be refused too: the token is stale for good
        self.complete(key, claim.token, result)
        return result

    def once(
        self,
        operation: str,
        *,
        key: Callable[..., str],
        request: Callable[..., Any] | None = None,
        lease_seconds: int | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of run_once; `key` (and `request`) get the function's arguments:

            @client.once("email.send", key=lambda lead, template: make_key("email", lead["id"], template))
            def send_email(lead, template): ...
        """

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                return self.run_once(
                    key(*args, **kwargs),
                    operation,
                    fn,
                    *args,
                    request=request(*args, **kwargs) if request else None,
                    lease_seconds=lease_seconds,
                    **kwargs,
                )

            return wrapper

        return decorator

    # --- plumbing ----------------------------------------------------------------------

    def _claim_patiently(
        self, key: str, operation: str, request: Any, lease_seconds: int | None
    ) -> tuple[Claim, float]:
        """The claim, and when (time.monotonic()) the request that got it was sent: the
        lease runs from the server's claim, which is no earlier."""
        for attempt in range(self.max_in_progress_retries + 1):
            sent_at = time.monotonic()
            try:
                return self.claim(key, operation, request, lease_seconds=lease_seconds), sent_at
            except InProgress as busy:
                if attempt == self.max_in_progress_retries:
                    raise
                time.sleep(patience(attempt, busy.retry_after, self.max_backoff))
        raise AssertionError("unreachable")  # pragma: no cover

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(self._send(lambda: self._http.post(path, json=body)))

    def _send(self, send: Callable[[], httpx.Response]) -> httpx.Response:
        """Send, retrying a 503 (the server could not reach its database: nothing was
        stored) and a failed connection up to `max_unavailable_retries` times, waiting
        Retry-After when given, else 0.5 s doubling, at most `max_backoff`.

        Safe for every call: a claim whose first try did commit before its answer was lost
        is answered on the retry with the 409 of its own lease, which is then waited out
        like any other (and taken over when it runs out); a complete or fail repeated with
        the same token and body is the same settlement, answered as the first was."""
        for attempt in range(self.max_unavailable_retries + 1):
            last = attempt == self.max_unavailable_retries
            try:
                reply = send()
            except httpx.TransportError:
                if last:
                    raise
                time.sleep(self._backoff(attempt, None))
                continue
            if reply.status_code != 503 or last:
                return reply
            time.sleep(self._backoff(attempt, reply.headers.get("Retry-After")))
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        try:
            wait = float(retry_after) if retry_after is not None else 0.5 * 2**attempt
        except ValueError:  # an HTTP date: not worth a parser here
            wait = 0.5 * 2**attempt
        return max(0.0, min(wait, self.max_backoff))

    def _json(self, reply: httpx.Response) -> dict[str, Any]:
        if reply.status_code < 400:
            return reply.json()
        try:
            problem = reply.json()
        except ValueError:
            problem = {"title": reply.reason_phrase, "detail": reply.text[:500]}
        kind = str(problem.get("type", ""))
        if kind.endswith(":request-in-progress"):
            raise InProgress(reply.status_code, problem, int(reply.headers.get("Retry-After", "1")))
        if kind.endswith(":idempotency-key-reused"):
            raise KeyMismatch(reply.status_code, problem)
        if kind.endswith(":outcome-unknown"):
            raise OutcomeUnknown(reply.status_code, problem)
        if kind.endswith(":stale-token"):
            raise LeaseLost(reply.status_code, problem)
        raise ApiError(reply.status_code, problem)


class _Heartbeat:
    """Renews a running attempt's lease every third of it from a daemon thread, until the
    `with` block ends (the thread is joined, so no renewal lands after a settle). `lost` is
    the LeaseLost of a refused renewal; a renewal that fails otherwise (the server down or
    slow) is tried again at the next beat, while the lease still has two thirds to run.

    The beats count from when the claim was sent (`sent_at`), not from its answer: a slow
    answer has already used part of the lease, and the first beat must not come a whole
    third after it."""

    def __init__(
        self, client: IdempotencyClient, key: str, token: int, lease_seconds: int | None, sent_at: float
    ) -> None:
        self.lost: LeaseLost | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(client, key, token, lease_seconds, sent_at), name="idempotency-heartbeat",
            daemon=True,
        )

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(
        self, client: IdempotencyClient, key: str, token: int, lease_seconds: int | None, sent_at: float
    ) -> None:
        interval = max(0.2, (lease_seconds or 30) / 3)
        due = sent_at + interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            due = time.monotonic() + interval
            try:
                client.heartbeat(key, token, lease_seconds=lease_seconds)
            except LeaseLost as lost:
                log.warning("the lease on %r was lost while its step ran; its result will not be stored", key)
                self.lost = lost
                return
            except (IdempotencyError, httpx.HTTPError) as exc:
                log.info("a heartbeat for %r failed (%s); trying again at the next", key, exc)
