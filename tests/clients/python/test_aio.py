"""The async client (idemdash_client/aio.py) against a live server: the sync client's
contract, awaited, and many run_once calls on one event loop."""

from __future__ import annotations

import asyncio
import inspect
import threading
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

import receipts
from idemdash.core.clients import create_token
from idemdash_client import (
    ApiError,
    AsyncIdempotencyClient,
    RequestInProgress,
    IdempotencyKeyReused,
    StaleToken,
    OutcomeUnknown,
    PreviousFailure,
    Unauthorized,
    current,
    make_key,
)
from receipts import store
from receipts.downstream import downstream_key
from receipts.models import Attempt, Receipt


@pytest.fixture
def token(live_server, transactional_db) -> str:
    return create_token("async-agent")[1]


def run(live_server, token: str, work, **options):
    """Run `work(client)` on a fresh event loop with a client of the live server."""

    async def main():
        async with AsyncIdempotencyClient(live_server.url, token, **{"wait_seconds": 0, **options}) as client:
            return await work(client)

    return asyncio.run(main())


def test_claim_complete_and_replay(live_server, token):
    async def work(idem):
        claim = await idem.claim("k", "email.send", {"to": "a"})
        assert claim.outcome == "claimed" and claim.token == 1 and not claim.replayed
        await idem.complete("k", claim.token, {"id": 7})
        again = await idem.claim("k", "email.send", {"to": "a"})
        return again, await idem.get("k"), await idem.get("unknown")

    again, found, missing = run(live_server, token, work)
    assert again.replayed and again.status == "completed" and again.response == {"id": 7}
    assert found["status"] == "completed" and missing is None


def test_a_held_key_raises_in_progress_with_retry_after(live_server, token):
    async def work(idem):
        await idem.claim("k", "email.send")
        await idem.claim("k", "email.send")

    with pytest.raises(RequestInProgress) as caught:
        run(live_server, token, work)
    assert caught.value.status == 409 and 1 <= caught.value.retry_after <= 10


def test_another_request_under_a_key_raises_key_mismatch(live_server, token):
    async def work(idem):
        await idem.claim("k", "email.send", {"to": "a"})
        await idem.claim("k", "email.send", {"to": "b"})

    with pytest.raises(IdempotencyKeyReused) as caught:
        run(live_server, token, work)
    assert caught.value.status == 422


def test_a_stale_token_raises_lease_lost(live_server, token):
    async def work(idem):
        claim = await idem.claim("k", "email.send")
        await idem.complete("k", claim.token, 1)
        await idem.complete("k", claim.token, 2)

    with pytest.raises(StaleToken):
        run(live_server, token, work)


def test_a_bad_token_raises_unauthorized_with_the_problem(live_server, transactional_db):
    with pytest.raises(Unauthorized) as caught:
        run(live_server, "idem_wrong", lambda idem: idem.claim("k", "email.send"))
    assert isinstance(caught.value, ApiError) and caught.value.status == 401
    assert caught.value.type == "urn:idemdash:problem:unauthorized" and caught.value.problem["title"]


def test_run_once_awaits_fn_once_and_replays_its_result(live_server, token):
    calls = []

    async def send(to: str) -> dict:
        await asyncio.sleep(0)
        calls.append(to)
        return {"sent": to}

    async def work(idem):
        first = await idem.run_once("k", "email.send", send, "a@example.com", request={"to": "a"})
        second = await idem.run_once("k", "email.send", send, "a@example.com", request={"to": "a"})
        return first, second

    assert run(live_server, token, work) == ({"sent": "a@example.com"},) * 2
    assert calls == ["a@example.com"]
    assert Receipt.objects.get().attempts == 1


def test_run_once_takes_a_plain_function_too(live_server, token):
    assert run(live_server, token, lambda idem: idem.run_once("k", "email.send", lambda n: n * 2, 21)) == 42


def test_current_gives_the_claim_inside_fn_and_the_tasks_it_starts(live_server, token):
    seen = []

    async def step():
        seen.append(current())
        await asyncio.create_task(asyncio.sleep(0, result=None))
        seen.append(await asyncio.create_task(_current_later()))
        return "sent"

    async def work(idem):
        result = await idem.run_once("k", "email.send", step)
        return result, current()

    assert run(live_server, token, work) == ("sent", None)
    first, in_task = seen
    assert first == in_task
    receipt = Receipt.objects.get(key="k")
    assert (first.key, first.scope, first.operation, first.attempt) == ("k", "client:async-agent", "email.send", 1)
    assert first.fencing_token == receipt.fencing_token
    assert first.downstream_key == downstream_key("client:async-agent", "k", receipt.created_at)
    assert receipts.current is current  # one ContextVar: what receipts.current() reads


async def _current_later():
    await asyncio.sleep(0)
    return receipts.current()


def test_run_once_fails_the_receipt_on_an_exception_and_the_next_run_retries(live_server, token):
    calls = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("smtp down")
        return "ok"

    async def first(idem):
        await idem.run_once("k", "email.send", flaky)

    with pytest.raises(ConnectionError):
        run(live_server, token, first)
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.error) == ("failed", "ConnectionError: smtp down")
    assert run(live_server, token, lambda idem: idem.run_once("k", "email.send", flaky)) == "ok"
    assert len(calls) == 2


def test_run_once_raises_previous_failure_for_a_burned_key(live_server, token, settings):
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}

    async def post() -> None:
        raise ValueError("rejected")

    with pytest.raises(ValueError):
        run(live_server, token, lambda idem: idem.run_once("k", "ledger.post", post))
    with pytest.raises(PreviousFailure) as caught:
        run(live_server, token, lambda idem: idem.run_once("k", "ledger.post", post))
    assert caught.value.error == "ValueError: rejected"


def test_run_once_refuses_a_result_it_cannot_store_and_fails_the_receipt(live_server, token):
    async def unstorable():
        return object()

    with pytest.raises(TypeError):
        run(live_server, token, lambda idem: idem.run_once("k", "email.send", unstorable))
    assert Receipt.objects.get().status == "failed"


def test_run_once_waits_out_a_held_key_honouring_retry_after(live_server, token, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s

    async def work(idem):
        await idem.claim("k", "email.send", lease_seconds=1)  # a worker that then died
        return await idem.run_once("k", "email.send", asyncio.sleep, 0, "mine")

    assert run(live_server, token, work) == "mine"
    assert Receipt.objects.get().attempts == 2  # taken over after the lease ran out


def test_run_once_gives_up_after_its_retries(live_server, token):
    async def work(idem):
        await idem.claim("k", "email.send")
        await idem.run_once("k", "email.send", asyncio.sleep, 0, "never")

    with pytest.raises(RequestInProgress):
        run(live_server, token, work, max_in_progress_retries=0)


def test_run_once_raises_lease_lost_when_a_heartbeat_is_refused_and_stores_nothing(
    live_server, token, settings, monkeypatch
):
    """As test_client.py's: each beat is answered however loaded the machine, and the step
    waits for the refusal instead of for a time."""
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # a beat every third of a second, so the first comes soon
    refused = asyncio.Event()
    beat = AsyncIdempotencyClient.heartbeat

    async def heartbeat(self, key, token, *, lease_seconds=None, timeout=None):
        try:
            return await beat(self, key, token, lease_seconds=lease_seconds, timeout=30)
        except StaleToken:
            refused.set()
            raise

    monkeypatch.setattr(AsyncIdempotencyClient, "heartbeat", heartbeat)

    def release() -> None:  # an operator, mid-step
        store.release(Receipt.objects.get(), actor="otto", reason="looked stuck")

    async def step() -> str:
        await asyncio.to_thread(release)
        await asyncio.wait_for(refused.wait(), 30)
        return "late"

    with pytest.raises(StaleToken):
        run(live_server, token, lambda idem: idem.run_once("k", "report.build", step, lease_seconds=1))
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.released
    log = list(Attempt.objects.order_by("id").values_list("outcome", "detail"))
    # One refused heartbeat; no completion was even tried (it would have logged a second one).
    assert [outcome for outcome, _ in log] == ["claimed", "released", "stale_token"]
    assert "heartbeat" in log[-1][1]


class _FirstHeartbeatUnanswered(httpx.AsyncHTTPTransport):
    """test_client.py's twin: counts heartbeats; given `silent_port`, the first goes there."""

    def __init__(self, silent_port: int | None) -> None:
        super().__init__()
        self.silent_port = silent_port
        self.heartbeats = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/heartbeat"):
            self.heartbeats += 1
            if self.heartbeats == 1 and self.silent_port:
                request = httpx.Request(request.method, request.url.copy_with(port=self.silent_port),
                                        headers=request.headers, content=await request.aread(),
                                        extensions=request.extensions)
        return await super().handle_async_request(request)


@pytest.mark.parametrize("first_beat", ["answered", "unanswered"])
def test_run_once_renews_its_lease_while_a_step_longer_than_the_lease_runs(
    live_server, token, settings, silent_port, first_beat
):
    """As test_client.py's: an unanswered beat is given up after a beat, and the next keeps the lease."""
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    transport = _FirstHeartbeatUnanswered(silent_port if first_beat == "unanswered" else None)
    seen = []

    async def work(idem):
        async with AsyncIdempotencyClient(live_server.url, token, wait_seconds=0, max_in_progress_retries=0) as other:

            async def build() -> str:
                for _ in range(9):  # 4.5 s under a 3 s lease, the loop free for the heartbeats
                    await asyncio.sleep(0.5)
                    try:
                        seen.append((await other.claim("k", "report.build")).outcome)
                    except RequestInProgress:
                        seen.append("in_progress")
                return "built"

            return await idem.run_once("k", "report.build", build, lease_seconds=3)

    assert run(live_server, token, work, transport=transport) == "built"
    assert seen == ["in_progress"] * 9 and transport.heartbeats >= 3
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts, receipt.response_body) == ("completed", 1, '"built"')
    assert not Attempt.objects.filter(outcome__in=["lease_takeover", "stale_token"]).exists()


class _DropsFirstConnections(httpx.AsyncHTTPTransport):
    """A real transport to the live server whose first `drops` requests never connect."""

    def __init__(self, drops: int) -> None:
        super().__init__()
        self.drops = drops
        self.sent: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.url.path)
        if self.drops:
            self.drops -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return await super().handle_async_request(request)


def test_a_connection_that_fails_is_retried_and_the_work_runs_once(live_server, token):
    transport = _DropsFirstConnections(drops=2)
    calls = []

    async def send():
        calls.append(1)
        return "sent"

    work = lambda idem: idem.run_once("k", "email.send", send)  # noqa: E731
    assert run(live_server, token, work, transport=transport, max_backoff=0.05) == "sent"
    assert calls == [1]
    assert transport.sent == ["/api/v1/receipts/claim"] * 3 + ["/api/v1/receipts/complete"]
    assert Receipt.objects.get().status == "completed"


def test_retries_are_bounded_and_the_last_error_is_raised(live_server, token):
    transport = _DropsFirstConnections(drops=10)
    with pytest.raises(httpx.ConnectError):
        run(live_server, token, lambda idem: idem.claim("k", "email.send"), transport=transport,
            max_unavailable_retries=2, max_backoff=0.01)
    assert len(transport.sent) == 3
    assert not Receipt.objects.exists()


def test_the_once_decorator_keys_calls_by_their_arguments(live_server, token):
    sent = []

    async def work(idem):
        @idem.once("email.send", key=lambda lead, template: make_key("email", lead, template))
        async def send_email(lead: str, template: str) -> str:
            sent.append((lead, template))
            return f"{template}->{lead}"

        assert inspect.iscoroutinefunction(send_email)  # as agent frameworks check a tool
        results = [await send_email("lead-1", "welcome"), await send_email("lead-1", "welcome"),
                   await send_email("lead-2", "welcome")]
        return results, send_email.__name__

    assert run(live_server, token, work) == (["welcome->lead-1", "welcome->lead-1", "welcome->lead-2"], "send_email")
    assert sent == [("lead-1", "welcome"), ("lead-2", "welcome")]


def test_the_server_side_wait_returns_the_first_attempts_result(live_server, token):
    async def work(idem):
        first = await idem.claim("k", "email.send")
        finisher = threading.Timer(0.3, lambda: asyncio.run(_complete(live_server, token, first.token)))
        finisher.start()
        try:
            return await idem.claim("k", "email.send", wait_seconds=5)
        finally:
            finisher.join()

    again = run(live_server, token, work)
    assert again.replayed and again.response == "done"


async def _complete(live_server, token: str, fencing_token: int) -> None:
    async with AsyncIdempotencyClient(live_server.url, token) as other:
        await other.complete("k", fencing_token, "done")


@pytest.mark.parametrize("callers", [10])
def test_concurrent_run_once_calls_with_one_key_make_one_effect(live_server, token, callers):
    """`asyncio.gather` of N run_once calls with one key on one loop: one runs the step, the
    others wait for it (server-side, then by retrying) and get its result."""
    effects = []

    async def send(lead: str) -> dict:
        effects.append(current().downstream_key)
        await asyncio.sleep(0.5)  # the others arrive while it runs
        return {"sent": lead, "message": len(effects)}

    async def work(idem):
        return await asyncio.gather(*(
            idem.run_once("welcome:lead-1", "email.send", send, "lead-1", request={"lead": "lead-1"})
            for _ in range(callers)
        ))

    results = run(live_server, token, work, wait_seconds=5)
    assert results == [{"sent": "lead-1", "message": 1}] * callers
    assert len(effects) == 1
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("completed", 1)
    outcomes = list(Attempt.objects.values_list("outcome", flat=True))
    assert outcomes.count("claimed") == 1 and len(outcomes) >= callers


def test_a_held_key_raises_outcome_unknown_and_runs_nothing(live_server, token, settings):
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    ran = []

    async def crash(idem):
        await idem.claim("held", "email.send", {"to": "a"}, lease_seconds=15)

    run(live_server, token, crash)
    Receipt.objects.filter(key="held").update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # died

    async def send(n):
        ran.append(n)

    with pytest.raises(OutcomeUnknown) as caught:
        run(live_server, token, lambda idem: idem.run_once("held", "email.send", send, 1, request={"to": "a"}))
    assert caught.value.status == 409 and caught.value.type == "urn:idemdash:problem:outcome-unknown"
    assert ran == []


def test_complete_fail_and_run_once_store_references(live_server, token):
    async def charge() -> dict:
        current().refer("stripe.charge", "ch_run")
        return {"ok": True}

    async def work(idem):
        claim = await idem.claim("charge-1", "payment.charge")
        await idem.complete("charge-1", claim.token, {}, references=[("stripe.charge", "ch_1")])
        claim = await idem.claim("charge-2", "payment.charge")
        await idem.fail("charge-2", claim.token, "declined", references=[{"kind": "order", "value": "o-2"}])
        await idem.run_once("charge-3", "payment.charge", charge)

    run(live_server, token, work)
    stored = {r.key: list(r.references.values_list("kind", "value")) for r in Receipt.objects.all()}
    assert stored == {
        "charge-1": [("stripe.charge", "ch_1")],
        "charge-2": [("order", "o-2")],
        "charge-3": [("stripe.charge", "ch_run")],
    }
