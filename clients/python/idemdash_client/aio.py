"""The async client: IdempotencyClient's methods as coroutines, on httpx.AsyncClient, for
agent tools and workers that run in an event loop. The same defaults, the same waiting
(Retry-After, then longer), the same retries of a 503 or a failed connection, the same
heartbeats (an asyncio task instead of a thread) and the same errors: what is sent and how
answers are read is the sync client's own code (client.Requests).

    async with AsyncIdempotencyClient("http://127.0.0.1:8000", token) as client:
        result = await client.run_once(make_key("invoice", invoice_id), "invoice.send", send, invoice_id)
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import httpx

from idemdash_client.client import Claim, Replayed, Requests, beat_interval, failure, patience
from idemdash_client.context import running
from idemdash_client.errors import IdempotencyError, RequestInProgress, StaleToken

log = logging.getLogger(__name__)


class AsyncIdempotencyClient(Requests):
    """Constructed as IdempotencyClient is; `transport` is an httpx.AsyncBaseTransport."""

    _http: httpx.AsyncClient

    def _open(self, **options: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(**options)

    @staticmethod
    def _wrap(fn: Callable[..., Any], call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """`once`'s wrapper, a coroutine function as agent frameworks expect of a tool."""

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return await call(*args, **kwargs)

        return wrapper

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncIdempotencyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- the four endpoints ------------------------------------------------------------

    async def claim(
        self,
        key: str,
        operation: str,
        request: Any = None,
        *,
        lease_seconds: int | None = None,
        wait_seconds: float | None = None,
    ) -> Claim:
        data = await self._post("claim", self._claim_body(key, operation, request, lease_seconds, wait_seconds))
        return self._claim_from(data, lease_seconds)

    async def complete(
        self, key: str, token: int, response: Any, *, references: Iterable[object] = ()
    ) -> dict[str, Any]:
        """As IdempotencyClient.complete."""
        return await self._post("complete", self._complete_body(key, token, response, references))

    async def fail(
        self, key: str, token: int, error: str, *, retryable: bool | None = None, references: Iterable[object] = ()
    ) -> dict[str, Any]:
        """As IdempotencyClient.fail."""
        return await self._post("fail", self._fail_body(key, token, error, retryable, references))

    async def heartbeat(
        self, key: str, token: int, *, lease_seconds: int | None = None, timeout: float | None = None
    ) -> dict[str, Any]:
        """As IdempotencyClient.heartbeat."""
        body = self._heartbeat_body(key, token, lease_seconds)
        if timeout is None:
            return await self._post("heartbeat", body)
        return self._json(await self._http.post("heartbeat", json=body, timeout=timeout))

    async def get(self, key: str) -> dict[str, Any] | None:
        """The receipt, or None when this client has none with that key."""
        reply = await self._send(lambda: self._http.get("", params={"key": key}))
        if reply.status_code == 404:
            return None
        return self._json(reply)

    # --- running work once -------------------------------------------------------------

    async def run_once(
        self,
        key: str,
        operation: str,
        fn: Callable[..., Awaitable[Any] | Any],
        *args: Any,
        request: Any = None,
        lease_seconds: int | None = None,
        **kwargs: Any,
    ) -> Any:
        """IdempotencyClient.run_once, awaited: fn may be a coroutine function (awaited in
        this task, so receipts.current() gives the claim inside it and in the tasks it
        starts) or a plain function (called in this task: a slow one blocks the loop, as it
        would anywhere). While fn runs, a task renews the lease every third of its length;
        a refused renewal makes run_once raise StaleToken when fn returns, storing nothing.
        While another caller holds the key, waits (asyncio.sleep, not blocking the loop)
        as the sync client does, then raises RequestInProgress."""
        claim, sent_at = await self._claim_patiently(key, operation, request, lease_seconds)
        claimed = self._owned(claim, key, operation)
        if isinstance(claimed, Replayed):
            return claimed.response
        assert claim.token is not None
        try:
            async with _AsyncHeartbeat(self, key, claim.token, claim.lease_seconds, sent_at) as beat:
                with running(claimed):
                    result = fn(*args, **kwargs)
                    if inspect.isawaitable(result):
                        result = await result
            json.dumps(result)  # refuse what cannot be stored before claiming success
        except BaseException as exc:
            try:
                await self.fail(key, claim.token, failure(exc), references=claimed.references)
            except (IdempotencyError, asyncio.CancelledError):
                pass  # the original error matters more; the lease will lapse by itself
            raise
        if beat.lost is not None:
            raise beat.lost  # completing would be refused too: the token is stale for good
        await self.complete(key, claim.token, result, references=claimed.references)
        return result

    # --- plumbing ----------------------------------------------------------------------

    async def _claim_patiently(
        self, key: str, operation: str, request: Any, lease_seconds: int | None
    ) -> tuple[Claim, float]:
        """As IdempotencyClient._claim_patiently, sleeping without blocking the loop."""
        for attempt in range(self.max_in_progress_retries + 1):
            sent_at = time.monotonic()
            try:
                return await self.claim(key, operation, request, lease_seconds=lease_seconds), sent_at
            except RequestInProgress as busy:
                if attempt == self.max_in_progress_retries:
                    raise
                await asyncio.sleep(patience(attempt, busy.retry_after, self.max_backoff))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(await self._send(lambda: self._http.post(path, json=body)))

    async def _send(self, send: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
        """As IdempotencyClient._send: a 503 or a failed connection retried up to
        `max_unavailable_retries` times."""
        for attempt in range(self.max_unavailable_retries + 1):
            last = attempt == self.max_unavailable_retries
            try:
                reply = await send()
            except httpx.TransportError:
                if last:
                    raise
                await asyncio.sleep(self._backoff(attempt, None))
                continue
            if reply.status_code != 503 or last:
                return reply
            await asyncio.sleep(self._backoff(attempt, reply.headers.get("Retry-After")))
        raise AssertionError("unreachable")  # pragma: no cover


class _AsyncHeartbeat:
    """client._Heartbeat as an asyncio task: renews the lease every third of it, counted
    from when the claim was sent, until the `async with` block ends; the task is awaited
    there, so no renewal lands after a settle. `lost` is the StaleToken of a refused renewal."""

    def __init__(
        self, client: AsyncIdempotencyClient, key: str, token: int, lease_seconds: int | None, sent_at: float
    ) -> None:
        self.lost: StaleToken | None = None
        self._args = (client, key, token, lease_seconds, sent_at)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _AsyncHeartbeat:
        self._task = asyncio.create_task(self._beat(*self._args), name="idempotency-heartbeat")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._stop.set()
        try:
            await self._task
        except asyncio.CancelledError:
            self._task.cancel()  # run_once itself was cancelled while waiting for a beat to end
            raise

    async def _beat(
        self, client: AsyncIdempotencyClient, key: str, token: int, lease_seconds: int | None, sent_at: float
    ) -> None:
        interval = beat_interval(lease_seconds)
        due = sent_at + interval
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, due - time.monotonic()))
                return
            except TimeoutError:
                pass
            due = time.monotonic() + interval
            try:
                await client.heartbeat(key, token, lease_seconds=lease_seconds, timeout=interval)
            except StaleToken as lost:
                log.warning("the lease on %r was lost while its step ran; its result will not be stored", key)
                self.lost = lost
                return
            except (IdempotencyError, httpx.HTTPError) as exc:
                log.info("a heartbeat for %r failed (%s); trying again at the next", key, exc)
