"""The Python client for the receipts JSON API, for workers and agents outside Django: the
sync IdempotencyClient (here) and the AsyncIdempotencyClient (idemdash_client/aio.py), with
the same methods, defaults, waiting and retries. What both send and how both read the
answers is here, once (Requests).

Imports no Django (tested): the `idemdash-client` distribution needs only httpx and rfc8785.

    client = IdempotencyClient("http://127.0.0.1:8000", token)
    result = client.run_once(make_key("invoice", invoice_id), "invoice.send", send, invoice_id)
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from idemdash_client.context import RunningClaim, running
from idemdash_client.errors import IdempotencyError, PreviousFailure, RequestInProgress, StaleToken, problem_error
from idemdash_client.references import validate_all
from idemdash_client.retries import backoff, parse_retry_after

log = logging.getLogger(__name__)


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


def _with_references(body: dict[str, Any], references: Iterable[object]) -> dict[str, Any]:
    """`body` with its "references" in the JSON API's form, checked here (InvalidReference)
    rather than refused with a 400 after the work is done; none: the field is left out."""
    checked = validate_all(references)
    if checked:
        body["references"] = [{"kind": kind, "value": value} for kind, value in checked]
    return body


def patience(attempt: int, retry_after: float, max_backoff: float) -> float:
    """How long a caller refused with RequestInProgress waits before its claim number `attempt + 1`
    (the HTTP client's and the in-process API's): the backoff from 1 s, at most
    max_backoff, never shorter than Retry-After (retries.backoff's jitter keeps a crowd of
    duplicates refused together from coming back in the same instant)."""
    return backoff(attempt + 1, 1.0, max_backoff, retry_after)


def failure(exc: BaseException) -> str:
    """The error run_once stores for a step that raised."""
    return f"{type(exc).__name__}: {exc}"[:2000]


def beat_interval(lease_seconds: int | None) -> float:
    """How often run_once renews a lease while its step runs: every third of it."""
    return max(0.2, (lease_seconds or 30) / 3)


class Requests:
    """The settings, the request bodies and the reading of answers both clients share; each
    client opens its own httpx client (`_open`) with these options."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        wait_seconds: float = 5.0,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        max_in_progress_retries: int = 5,
        max_unavailable_retries: int = 3,
        max_backoff: float = 10.0,
    ) -> None:
        self.wait_seconds = wait_seconds
        self.max_in_progress_retries = max_in_progress_retries
        self.max_unavailable_retries = max_unavailable_retries
        self.max_backoff = max_backoff
        self._http = self._open(
            base_url=base_url.rstrip("/") + "/api/v1/receipts/",
            headers={"Authorization": f"Bearer {token}"},
            # The server may hold a claim for wait_seconds: never time out before it answers.
            timeout=timeout + wait_seconds,
            transport=transport,
        )

    def _open(self, **options: Any) -> Any:
        raise NotImplementedError

    def _claim_body(
        self, key: str, operation: str, request: Any, lease_seconds: int | None, wait_seconds: float | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"key": key, "operation": operation, "request": request}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        wait = self.wait_seconds if wait_seconds is None else wait_seconds
        if wait:
            body["wait_seconds"] = wait
        return body

    @staticmethod
    def _claim_from(data: dict[str, Any], lease_seconds: int | None) -> Claim:
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

    @staticmethod
    def _complete_body(key: str, token: int, response: Any, references: Iterable[object]) -> dict[str, Any]:
        body: dict[str, Any] = {"key": key, "token": token, "response": response}
        return _with_references(body, references)

    @staticmethod
    def _fail_body(
        key: str, token: int, error: str, retryable: bool | None, references: Iterable[object] = ()
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"key": key, "token": token, "error": error or "failed"}
        if retryable is not None:
            body["retryable"] = retryable
        return _with_references(body, references)

    @staticmethod
    def _heartbeat_body(key: str, token: int, lease_seconds: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {"key": key, "token": token}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return body

    @staticmethod
    def _owned(claim: Claim, key: str, operation: str) -> Any:
        """What run_once does with a claim before fn runs: a replay's stored result (as
        `Replayed`), PreviousFailure for a burned key, else the RunningClaim fn runs under."""
        if claim.replayed:
            if claim.status == "failed":
                raise PreviousFailure.failed(key, claim.error or "", claim.response)
            return Replayed(claim.response)
        assert claim.token is not None
        return RunningClaim(
            key=key,
            scope=claim.scope or "",
            operation=operation,
            fencing_token=claim.token,
            attempt=claim.attempts or 1,
            downstream_key=claim.downstream_key or "",
        )

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

        On the async client the decorated function is a coroutine function (`async def`,
        awaited as before)."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                return self.run_once(  # type: ignore[attr-defined]
                    key(*args, **kwargs),
                    operation,
                    fn,
                    *args,
                    request=request(*args, **kwargs) if request else None,
                    lease_seconds=lease_seconds,
                    **kwargs,
                )

            return self._wrap(fn, call)

        return decorator

    @staticmethod
    def _wrap(fn: Callable[..., Any], call: Callable[..., Any]) -> Callable[..., Any]:
        raise NotImplementedError

    def _backoff(self, attempt: int, retry_after: str | None) -> float:
        """The wait before retry `attempt + 1` of a 503 or a failed connection: the backoff
        from 0.5 s, at most max_backoff, never shorter than Retry-After (seconds or an HTTP
        date) up to max_backoff."""
        return backoff(attempt + 1, 0.5, self.max_backoff, parse_retry_after(retry_after), self.max_backoff)

    @staticmethod
    def _json(reply: httpx.Response) -> dict[str, Any]:
        """The answer's JSON, or the typed error of its problem (errors.PROBLEM_ERRORS)."""
        if reply.status_code < 400:
            return reply.json()
        try:
            problem = reply.json()
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            problem = {"title": reply.reason_phrase, "detail": reply.text[:500]}
        raise problem_error(reply.status_code, problem, parse_retry_after(reply.headers.get("Retry-After")))


@dataclass(frozen=True)
class Replayed:
    """run_once's claim was a replay: `response` is the stored result."""

    response: Any


class IdempotencyClient(Requests):
    """`IdempotencyClient(base_url, token, *, timeout=10.0, wait_seconds=5.0, transport=None,
    max_in_progress_retries=5, max_unavailable_retries=3, max_backoff=10.0)`; `transport`
    is an httpx.BaseTransport."""

    _http: httpx.Client

    def _open(self, **options: Any) -> httpx.Client:
        return httpx.Client(**options)

    @staticmethod
    def _wrap(fn: Callable[..., Any], call: Callable[..., Any]) -> Callable[..., Any]:
        return functools.wraps(fn)(call)

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
        data = self._post("claim", self._claim_body(key, operation, request, lease_seconds, wait_seconds))
        return self._claim_from(data, lease_seconds)

    def complete(self, key: str, token: int, response: Any, *, references: Iterable[object] = ()) -> dict[str, Any]:
        """Store the result of the attempt holding `token`, with `references` ((kind, value)
        pairs or {"kind", "value"} objects: what the attempt worked on), checked here first
        (InvalidReference) by the server's rules."""
        return self._post("complete", self._complete_body(key, token, response, references))

    def fail(
        self, key: str, token: int, error: str, *, retryable: bool | None = None, references: Iterable[object] = ()
    ) -> dict[str, Any]:
        """Fail the attempt holding `token`, with its `references` (as complete)."""
        return self._post("fail", self._fail_body(key, token, error, retryable, references))

    def heartbeat(
        self, key: str, token: int, *, lease_seconds: int | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """Renew the lease of the attempt holding `token` for `lease_seconds` from now (the
        operation's lease when None). StaleToken: the token no longer owns the receipt. With
        `timeout`, sent once and given up after that many seconds, as run_once sends each
        beat (the next beat is its retry); else with the client's timeout and retries."""
        body = self._heartbeat_body(key, token, lease_seconds)
        if timeout is None:
            return self._post("heartbeat", body)
        return self._json(self._http.post("heartbeat", json=body, timeout=timeout))

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
        request raises IdempotencyKeyReused). fn's result must be JSON-serialisable; it is stored and
        returned to every later call. If fn raises, the receipt is marked failed (so the
        next call runs fn again, unless the operation burns keys) and the error re-raised.
        While another worker holds the key, waits up to `max_in_progress_retries` times,
        honouring Retry-After, then raises RequestInProgress.

        While fn runs, a background thread renews the lease every third of its length (a
        heartbeat), so a step slower than its lease, or a server slow to take the
        completion, is not taken over. If a heartbeat is refused (the lease was lost anyway:
        an operator released the key, or the process stalled past the lease and another
        worker took over), fn cannot be stopped; when it returns its result is not stored
        and StaleToken is raised, as it is when completing is refused.

        While fn runs, receipts.current() gives the claim, with the `downstream_key` the
        server handed out: the same for every attempt of this claim, for fn to send to a
        provider that honours idempotency keys.
        """
        claim, sent_at = self._claim_patiently(key, operation, request, lease_seconds)
        claimed = self._owned(claim, key, operation)
        if isinstance(claimed, Replayed):
            return claimed.response
        assert claim.token is not None
        try:
            with _Heartbeat(self, key, claim.token, claim.lease_seconds, sent_at) as beat, running(claimed):
                result = fn(*args, **kwargs)
            json.dumps(result)  # refuse what cannot be stored before claiming success
        except BaseException as exc:
            try:
                self.fail(key, claim.token, failure(exc), references=claimed.references)
            except IdempotencyError:
                pass  # the original error matters more; the lease will lapse by itself
            raise
        if beat.lost is not None:
            raise beat.lost  # completing would be refused too: the token is stale for good
        self.complete(key, claim.token, result, references=claimed.references)
        return result

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
            except RequestInProgress as busy:
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


class _Heartbeat:
    """Renews a running attempt's lease every third of it from a daemon thread, until the
    `with` block ends (the thread is joined, so no renewal lands after a settle). `lost` is
    the StaleToken of a refused renewal; a renewal that fails otherwise (the server down, or
    no answer within a beat) is tried again at the next beat, while the lease still has a
    third to run.

    The beats count from when the claim was sent (`sent_at`), not from its answer: a slow
    answer has already used part of the lease, and the first beat must not come a whole
    third after it."""

    def __init__(
        self, client: IdempotencyClient, key: str, token: int, lease_seconds: int | None, sent_at: float
    ) -> None:
        self.lost: StaleToken | None = None
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
        interval = beat_interval(lease_seconds)
        due = sent_at + interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            due = time.monotonic() + interval
            try:
                # Given up after a beat: the client's timeout and retries would hold the beats
                # back past the lease's end while the server does not answer.
                client.heartbeat(key, token, lease_seconds=lease_seconds, timeout=interval)
            except StaleToken as lost:
                log.warning("the lease on %r was lost while its step ran; its result will not be stored", key)
                self.lost = lost
                return
            except (IdempotencyError, httpx.HTTPError) as exc:
                log.info("a heartbeat for %r failed (%s); trying again at the next", key, exc)
