"""The in-process API (receipts/inprocess.py): run_once, arun_once and the `once` decorator
on a real database, with threads, forked processes and a kill -9; and receipts.current()
while their steps run."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import threading
import time
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connections
from django.test import Client
from django.utils import timezone

import receipts
from idemdash.core.clients import create_token
from receipts import inprocess, keys, store, waiting
from receipts.downstream import downstream_key
from receipts.models import Attempt, Receipt
from tests.concurrently import in_threads_of_forked_processes, killed_once_it_reaches
from tests.waits import until


def counting(results: list | None = None):
    """A step that counts its runs and says which claim it ran under."""
    calls: list = [] if results is None else results

    def send(user_id: int, *, template: str = "welcome") -> dict:
        claim = receipts.current()
        calls.append(claim)
        return {"sent": user_id, "template": template, "downstream_key": claim.downstream_key}

    return send, calls


# --- run_once ----------------------------------------------------------------------------------

@pytest.mark.django_db
def test_run_once_runs_the_step_once_and_replays_its_stored_result():
    send, calls = counting()
    first = receipts.run_once("welcome:7", "email.send", send, 7, template="hello")
    again = receipts.run_once("welcome:7", "email.send", send, 7, template="hello")
    assert len(calls) == 1
    assert first == again == {"sent": 7, "template": "hello", "downstream_key": calls[0].downstream_key}
    receipt = Receipt.objects.get()
    assert (receipt.scope, receipt.status, receipt.response_content_type) == ("inprocess", "completed", "application/json")
    assert json.loads(receipt.response_body) == first
    assert list(Attempt.objects.order_by("id").values_list("outcome", flat=True)) == ["claimed", "completed", "replayed"]


@pytest.mark.django_db
def test_the_step_runs_under_a_current_claim_and_nothing_is_current_outside_it():
    send, calls = counting()
    assert receipts.current() is None
    receipts.run_once("welcome:7", "email.send", send, 7, scope="tenant:acme")
    assert receipts.current() is None
    [claim] = calls
    receipt = Receipt.objects.get()
    assert (claim.key, claim.scope, claim.operation) == ("welcome:7", "tenant:acme", "email.send")
    assert (claim.fencing_token, claim.attempt) == (receipt.fencing_token, 1)
    assert claim.downstream_key == downstream_key("tenant:acme", "welcome:7", receipt.created_at)
    with pytest.raises(AttributeError):
        claim.key = "other"  # frozen


@pytest.mark.django_db
def test_a_failed_step_is_run_again_under_the_same_downstream_key_and_counts_its_attempts():
    seen = []

    def flaky() -> str:
        seen.append(receipts.current())
        if len(seen) == 1:
            raise ConnectionError("provider timed out")
        return "sent"

    with pytest.raises(ConnectionError):
        receipts.run_once("report:2026-W48", "report.send", flaky)
    assert Receipt.objects.get().status == "failed"
    assert receipts.run_once("report:2026-W48", "report.send", flaky) == "sent"
    assert [c.attempt for c in seen] == [1, 2]
    assert seen[0].downstream_key == seen[1].downstream_key
    assert seen[0].fencing_token < seen[1].fencing_token


@pytest.mark.django_db
def test_an_operation_that_burns_keys_raises_previous_failure_and_never_runs_again(settings):
    settings.RECEIPTS_OPERATIONS = {"payment.*": {"on_failure": "burn"}}
    runs = []

    def charge() -> None:
        runs.append(1)
        raise RuntimeError("card declined")

    with pytest.raises(RuntimeError):
        receipts.run_once("charge:1", "payment.charge", charge)
    with pytest.raises(receipts.PreviousFailure) as failure:
        receipts.run_once("charge:1", "payment.charge", charge)
    assert runs == [1]
    assert failure.value.error == "RuntimeError: card declined"


@pytest.mark.django_db
def test_a_key_reused_for_another_request_raises_key_mismatch_with_the_apis_problem():
    receipts.run_once("lead:1", "email.send", lambda: "ok", request={"lead": 1})
    with pytest.raises(receipts.IdempotencyKeyReused) as mismatch:
        receipts.run_once("lead:1", "email.send", lambda: "ok", request={"lead": 2})
    assert mismatch.value.status == 422
    assert mismatch.value.type == "urn:idemdash:problem:idempotency-key-reused"


@pytest.mark.django_db
def test_a_key_whose_last_attempt_lapsed_under_hold_raises_outcome_unknown_and_runs_nothing(settings):
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    store.claim("inprocess", "held", "email.send", None)  # a worker that then died
    Receipt.objects.filter(key="held").update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    runs = []
    with pytest.raises(receipts.OutcomeUnknown) as unknown:
        receipts.run_once("held", "email.send", runs.append, 1)
    assert runs == [] and unknown.value.status == 409
    assert unknown.value.type == "urn:idemdash:problem:outcome-unknown"


@pytest.mark.django_db
def test_a_key_held_by_a_running_attempt_raises_in_progress_after_the_retries(monkeypatch):
    monkeypatch.setattr(inprocess, "WAIT_SECONDS", 0)
    monkeypatch.setattr(inprocess, "IN_PROGRESS_RETRIES", 0)
    store.claim("inprocess", "busy", "email.send", None)
    runs = []
    with pytest.raises(receipts.RequestInProgress) as busy:
        receipts.run_once("busy", "email.send", runs.append, 1)
    assert runs == [] and busy.value.status == 409 and busy.value.retry_after >= 1
    assert busy.value.type == "urn:idemdash:problem:request-in-progress"


@pytest.mark.django_db
def test_a_result_that_is_not_json_is_refused_before_it_is_stored_naming_the_encoder():
    with pytest.raises(TypeError, match="encoder=") as refused:
        receipts.run_once("price:1", "quote.make", lambda: {"price": Decimal("9.99")})
    assert "DjangoJSONEncoder" in str(refused.value)
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.response_body == "" and receipt.completed_at is None
    assert receipt.error.startswith("TypeError: The result of 'quote.make' cannot be stored")


@pytest.mark.django_db
def test_an_encoder_stores_what_plain_json_cannot_and_the_replay_gives_its_json():
    quote = lambda: {"price": Decimal("9.99")}  # noqa: E731
    assert receipts.run_once("price:1", "quote.make", quote, encoder=DjangoJSONEncoder) == {"price": Decimal("9.99")}
    assert receipts.run_once("price:1", "quote.make", quote, encoder=DjangoJSONEncoder) == {"price": "9.99"}


@pytest.mark.django_db
def test_nan_is_not_json_and_is_refused():
    with pytest.raises(TypeError, match="encoder="):
        receipts.run_once("nan", "quote.make", lambda: float("nan"))


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"request": {"when": object()}}, ValueError),
        ({"request": float("inf")}, ValueError),
        ({"scope": ""}, ValueError),
        ({"scope": "s" * 256}, ValueError),
        ({"encoder": dict}, TypeError),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_claimed(kwargs, error):
    with pytest.raises(error):
        receipts.run_once("k", "email.send", lambda: None, **kwargs)
    assert not Receipt.objects.exists() and not Attempt.objects.exists()


@pytest.mark.django_db
def test_an_async_step_given_to_run_once_is_refused_before_it_is_claimed():
    async def step() -> None: ...

    with pytest.raises(TypeError, match="arun_once"):
        receipts.run_once("k", "email.send", step)
    assert not Receipt.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_step_longer_than_its_lease_keeps_it_while_it_runs(settings):
    """The lease is renewed by idemdash/core/leases.py:kept (SQLite too: the step holds no transaction),
    so a duplicate that arrives after the first lease would have run out is refused, not let in."""
    seen = []
    receipt = Receipt.objects.filter(scope="inprocess", key="slow")

    def duplicate() -> None:
        try:
            seen.append(store.claim("inprocess", "slow", "report.send", None).outcome)
        finally:
            connections.close_all()

    def slow() -> str:
        for _ in range(2):  # two leases' worth: renewed each time, not once
            # The lease runs out (the test moves its end into the past) while the step runs...
            receipt.update(lease_expires_at=timezone.now() - timedelta(seconds=1))
            # ...and the renewal thread, a third of a lease later, gives it a lease again.
            until(lambda: receipt.get().lease_expires_at > timezone.now(), "the renewal thread renews the lease")
            other = threading.Thread(target=duplicate)
            other.start()
            other.join(10)
        return "done"

    assert receipts.run_once("slow", "report.send", slow, lease_seconds=1) == "done"
    assert seen == ["in_progress", "in_progress"]
    assert not Attempt.objects.filter(outcome__in=["lease_takeover", "stale_token"]).exists()
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("completed", 1)


@pytest.mark.django_db(transaction=True)
def test_a_step_whose_key_was_released_meanwhile_raises_lease_lost_and_stores_nothing():
    def step() -> str:
        receipt = Receipt.objects.get()
        store.release(receipt, actor="op", reason="stuck")  # an operator, while the step runs
        return "too late"

    with pytest.raises(receipts.StaleToken) as lost:
        receipts.run_once("r", "email.send", step)
    assert lost.value.type == "urn:idemdash:problem:stale-token"
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.response_body == ""


# --- the same validation as the HTTP paths --------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize(
    ("key", "operation", "refused"),
    [
        ("", "email.send", "key"),
        ("k" * 256, "email.send", "key"),
        ("tab\there", "email.send", "key"),
        ("Zoë", "email.send", "key"),
        (42, "email.send", "key"),
        (None, "email.send", "key"),
        ("k", "", "operation"),
        ("k", "o" * 101, "operation"),
        ("k", "email send", "operation"),
        ("k", "émail", "operation"),
        ("k", 7, "operation"),
        ("k" * 255, "o" * 100, None),
        (" ~ printable ~ ", "a-b_c.d:e/f", None),
    ],
)
def test_keys_and_operations_are_taken_or_refused_alike_in_process_and_over_the_json_api(key, operation, refused):
    token = create_token("same-rules")[1]
    answer = Client().post(
        "/api/v1/receipts/claim",
        json.dumps({"key": key, "operation": operation}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token}"},
    )
    errors = {"key": keys.InvalidKey, "operation": keys.InvalidOperation}
    if refused is None:
        assert answer.status_code == 201
        assert receipts.run_once(key, operation, lambda: "ran") == "ran"
        return
    assert answer.status_code == 400 and answer.json()["field"] == refused
    with pytest.raises(errors[refused]):
        receipts.run_once(key, operation, lambda: "ran")
    assert not Receipt.objects.filter(scope="inprocess").exists()


# --- the decorator --------------------------------------------------------------------------

@pytest.mark.django_db
def test_the_decorator_derives_the_key_from_the_tasks_arguments():
    sent = []

    @receipts.once("email.send", key=lambda user_id, **_: f"welcome:{user_id}")
    def send_welcome(user_id: int, *, template: str = "welcome") -> int:
        sent.append((user_id, template, receipts.current().key))
        return user_id

    assert [send_welcome(1), send_welcome(1), send_welcome(2, template="x"), send_welcome(1)] == [1, 1, 2, 1]
    assert sent == [(1, "welcome", "welcome:1"), (2, "x", "welcome:2")]
    assert send_welcome.__name__ == "send_welcome"


def test_the_decorator_refuses_a_bad_operation_or_scope_when_the_module_is_imported():
    with pytest.raises(keys.InvalidOperation):
        receipts.once("email send", key=str)
    with pytest.raises(ValueError):
        receipts.once("email.send", key=str, scope="")


# --- async ------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_arun_once_runs_an_async_step_once_and_its_claim_holds_in_tasks_and_threads():
    runs = []

    async def step(n: int) -> dict:
        claim = receipts.current()
        in_task = await asyncio.create_task(asyncio.sleep(0, receipts.current()))
        in_thread = await asyncio.to_thread(receipts.current)
        runs.append(n)
        return {"same": claim == in_task == in_thread, "key": claim.key}

    async def twice() -> list:
        first = await receipts.arun_once("a:1", "email.send", step, 1)
        return [first, await receipts.arun_once("a:1", "email.send", step, 1), receipts.current()]

    assert async_to_sync(twice)() == [{"same": True, "key": "a:1"}, {"same": True, "key": "a:1"}, None]
    assert runs == [1]


@pytest.mark.django_db(transaction=True)
def test_arun_once_runs_a_sync_step_off_the_event_loop_and_fails_it_by_policy():
    def sync_step() -> str:
        assert receipts.current().key == "a:2"
        Receipt.objects.count()  # the ORM: allowed, so not on the event loop
        raise ValueError("nope")

    with pytest.raises(ValueError):
        async_to_sync(receipts.arun_once)("a:2", "email.send", sync_step)
    assert Receipt.objects.get().status == "failed"


@pytest.mark.django_db(transaction=True)
def test_the_decorator_on_an_async_task_gives_an_async_function():
    sent = []

    @receipts.once("email.send", key=lambda user_id: f"welcome:{user_id}")
    async def send_welcome(user_id: int) -> int:
        sent.append(receipts.current().downstream_key)
        return user_id

    async def three() -> list:
        return [await send_welcome(5), await send_welcome(5), await send_welcome(6)]

    assert async_to_sync(three)() == [5, 5, 6]
    assert len(sent) == 2 and len(set(sent)) == 2


@pytest.mark.django_db(transaction=True)
def test_arun_once_a_duplicate_waits_on_the_event_loop_and_is_woken_when_the_first_attempt_completes():
    events = []

    async def scenario() -> list:
        release = asyncio.Event()

        async def step() -> dict:
            events.append("first runs")
            await release.wait()
            return {"sent": 1}

        async def until(condition) -> None:
            for _ in range(500):  # bounded: 5 s
                if await condition():
                    return
                await asyncio.sleep(0.01)
            raise AssertionError(f"{events}: never happened")

        async def duplicate_waits() -> bool:
            return waiting.waiting_now() == 1

        # A lease of a minute: a duplicate that only slept would sleep its Retry-After (10 s).
        first = asyncio.create_task(receipts.arun_once("w:1", "email.send", step, lease_seconds=60))
        await until(Receipt.objects.filter(key="w:1").aexists)
        duplicate = asyncio.create_task(receipts.arun_once("w:1", "email.send", step, lease_seconds=60))
        # The duplicate holds a waiting slot while this coroutine still runs: the loop is free.
        await until(duplicate_waits)
        events.append("duplicate waits")
        release.set()
        events.append(("first", await first))
        events.append(("duplicate", await asyncio.wait_for(duplicate, timeout=5)))
        return events

    assert async_to_sync(scenario)() == ["first runs", "duplicate waits", ("first", {"sent": 1}), ("duplicate", {"sent": 1})]
    # Logged as a duplicate that waited for the first attempt's result, never refused meanwhile.
    outcomes = list(Attempt.objects.order_by("pk").values_list("outcome", flat=True))
    assert outcomes == ["claimed", "completed", "waited"]
    assert waiting.waiting_now() == 0


# --- current() in threads ---------------------------------------------------------------------

@pytest.mark.django_db
def test_the_claim_holds_in_a_thread_started_with_a_copy_of_the_context_only():
    seen = {}

    def step() -> None:
        copied = threading.Thread(target=contextvars.copy_context().run, args=(lambda: seen.update(copied=receipts.current()),))
        bare = threading.Thread(target=lambda: seen.update(bare=receipts.current()))
        for t in (copied, bare):
            t.start()
            t.join()
        seen["step"] = receipts.current()

    receipts.run_once("t", "email.send", step)
    assert seen["copied"] == seen["step"] and seen["step"].key == "t"
    assert seen["bare"] is None


@pytest.mark.django_db
def test_a_claim_inside_a_claim_is_current_inside_and_the_outer_one_again_after():
    seen = []

    def inner() -> None:
        seen.append(receipts.current().key)

    def outer() -> None:
        seen.append(receipts.current().key)
        receipts.run_once("inner", "email.send", inner)
        seen.append(receipts.current().key)

    receipts.run_once("outer", "email.send", outer)
    assert seen == ["outer", "inner", "outer"]


# --- real concurrency: threads and processes ----------------------------------------------------

KEYS = [f"welcome:{i}" for i in range(8)]
PROCESSES = 4
THREADS = 4


def _caller(effects: Path, thread: int, start: threading.Barrier, out: list) -> None:
    def send(key: str) -> str:
        with open(effects / key, "a") as f:  # the effect, shared by every process
            f.write(f"{os.getpid()}:{threading.get_ident()}:{receipts.current().downstream_key}\n")
        time.sleep(0.02)  # hold the claim while the others arrive
        return f"sent {key}"

    try:
        start.wait()
        for key in KEYS:
            out.append(receipts.run_once(key, "email.send", send, key))
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes_and_threads_calling_run_once_on_the_same_keys_make_one_effect_per_key(tmp_path, settings):
    settings.RECEIPTS_MAX_WAITERS = THREADS  # every caller of a process may wait (the forks inherit it)
    results = in_threads_of_forked_processes(_caller, THREADS, [(tmp_path,)] * PROCESSES, timeout=180)
    # Every caller got the one result of its key: the first's, or the replay of it.
    assert Counter(results) == {f"sent {key}": PROCESSES * THREADS for key in KEYS}
    for key in KEYS:
        lines = (tmp_path / key).read_text().splitlines()
        assert len(lines) == 1, f"{key} ran {len(lines)} times: {lines}"
    assert Receipt.objects.filter(status="completed").count() == len(KEYS)
    assert Attempt.objects.filter(outcome="claimed").count() == len(KEYS)


# --- kill -9 mid-step: the re-run sends the same downstream key --------------------------------

def _killed_child(provider: str, sent: str) -> None:
    def send() -> str:
        with open(provider, "a") as f:  # what the provider received: the key, then the effect
            f.write(receipts.current().downstream_key + "\n")
        Path(sent).touch()
        time.sleep(60)  # killed here: after the effect, before the receipt is settled
        return "sent"

    receipts.run_once("invoice:9", "email.send", send, lease_seconds=1)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_killed_after_its_effect_is_run_again_with_the_same_downstream_key(tmp_path):
    provider, sent = tmp_path / "provider.log", tmp_path / "sent"
    killed_once_it_reaches(_killed_child, (str(provider), str(sent)), sent)
    assert Receipt.objects.get().status == "processing"  # never settled

    def send_again() -> str:
        with open(provider, "a") as f:
            f.write(receipts.current().downstream_key + "\n")
        return "sent"

    # Waits out the dead attempt's lease (no longer renewed), then takes it over: "rerun".
    assert receipts.run_once("invoice:9", "email.send", send_again) == "sent"
    keys = provider.read_text().splitlines()
    assert len(keys) == 2 and len(set(keys)) == 1  # two calls, one key: the provider makes one effect
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("completed", 2)
    assert Attempt.objects.filter(outcome="lease_takeover").count() == 1


# --- django-q2: a real qcluster runs a decorated task enqueued several times ----------------------

@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_decorated_task_enqueued_again_and_again_runs_once_per_key_in_a_real_qcluster(tmp_path):
    from django_q.models import Success
    from django_q.tasks import async_task

    from tests.qcluster import start_qcluster, stop_process

    effects = {user: tmp_path / f"user-{user}" for user in (1, 2)}
    log = tmp_path / "qcluster.log"
    # Three workers take the duplicates at once; successes are kept, to see what each returned.
    cluster = start_qcluster(log, Q_WORKERS="3", Q_SAVE_LIMIT="0")
    try:
        for user in [1, 1, 2, 1, 1, 2, 1, 1]:
            async_task("tests.receipts.inprocess_tasks.send_welcome", user, str(effects[user]))
        deadline = time.monotonic() + 90
        while Success.objects.count() < 8 and time.monotonic() < deadline and cluster.poll() is None:
            time.sleep(0.25)
        assert Success.objects.count() == 8, log.read_text()[-3000:]
    finally:
        stop_process(cluster)
        connections.close_all()
    for user, path in effects.items():
        assert len(path.read_text().splitlines()) == 1, path.read_text()
    assert Counter(Success.objects.values_list("result", flat=True)) == {
        "welcome sent to 1": 6, "welcome sent to 2": 2,
    }
    assert Receipt.objects.filter(status="completed").count() == 2
