"""`wait_seconds` / `Prefer: wait`: the waiter is woken by the first attempt's completion,
not by a tight polling loop on the database."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Callable

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from receipts import store, waiting
from receipts.models import Attempt
from tests.clock import HeldWaiterTimer
from tests.concurrently import uncommitted, until_transactions_wait_on_locks
from tests.waits import until

SCOPE = "client:wait"


def _complete_when(ready: Callable[[], bool], key: str, token: int) -> threading.Thread:
    """A thread, on its own connection, that completes the key once `ready()` holds."""

    def complete() -> None:
        try:
            until(ready, f"the moment to complete {key}")
            store.complete(store.Held(SCOPE, key, token), body="done")
        finally:
            connections.close_all()

    thread = threading.Thread(target=complete)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_waiter_gets_the_replay_and_reads_the_database_only_a_few_times(monkeypatch):
    # 1.5 s of waiting on the store's held clock: the waiter's timer runs out at once each time.
    timer = HeldWaiterTimer(monkeypatch, reach=1.5)
    first = store.claim(SCOPE, "w1", "email.send", {}, lease_seconds=60)
    worker = _complete_when(timer.reached.is_set, "w1", first.token)
    with CaptureQueriesContext(connection) as queries:
        result = store.claim(SCOPE, "w1", "email.send", {}, wait_seconds=20)
    worker.join(30)
    assert result.outcome == "replayed"
    assert result.receipt.response_body == "done"
    assert result.waited_ms >= 1500  # the held clock's
    # Every look at the key reads it: a SELECT, or on PostgreSQL the claim-or-replay statement.
    receipt_reads = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))]
    # A tight loop would read hundreds of times in 1.5 s; the growing timer reads a handful:
    # once after each interval it waited out (50 ms doubling), once more when woken.
    assert timer.intervals == [0.05, 0.1, 0.2, 0.4]
    assert len(receipt_reads) <= 10, len(receipt_reads)


@pytest.mark.django_db(transaction=True)
def test_a_waiter_gives_up_with_in_progress_after_its_wait_and_the_log_keeps_its_wait():
    store.claim(SCOPE, "w2", "email.send", {}, lease_seconds=60)
    result = store.claim(SCOPE, "w2", "email.send", {}, wait_seconds=0.3)
    # About the 0.3 s it asked for, counted from the look that found the first attempt running
    # (so however slow that look; not asserted: timings are the bench's, not the suite's).
    assert result.outcome == "in_progress" and not result.wait_refused and result.waited_ms > 0
    # Answered 409 after its wait: an in_progress line (a concurrent duplicate either way).
    logged = Attempt.objects.filter(key="w2").exclude(outcome="claimed").get()
    assert (logged.outcome, logged.waited_ms) == ("in_progress", result.waited_ms)


@pytest.mark.django_db(transaction=True)
def test_a_waiter_answered_with_the_result_is_logged_as_waited_not_replayed():
    first = store.claim(SCOPE, "w5", "email.send", {}, lease_seconds=60)
    # Completed once the waiter holds its waiting slot: it has met the running first attempt.
    worker = _complete_when(lambda: waiting.waiting_now() == 1, "w5", first.token)
    result = store.claim(SCOPE, "w5", "email.send", {}, wait_seconds=20)
    worker.join(30)
    assert result.outcome == "replayed" and result.waited_ms > 0
    logged = Attempt.objects.filter(key="w5", outcome__in=["waited", "replayed"]).get()
    assert (logged.outcome, logged.waited_ms) == ("waited", result.waited_ms)
    # A caller that comes after the completion did not wait: a plain replay.
    assert store.claim(SCOPE, "w5", "email.send", {}).waited_ms is None
    assert Attempt.objects.filter(key="w5", outcome="replayed", waited_ms=None).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_waiter_that_takes_over_a_lapsed_lease_keeps_its_outcome_and_its_wait():
    store.claim(SCOPE, "w6", "email.send", {}, lease_seconds=1)  # a worker that dies
    result = store.claim(SCOPE, "w6", "email.send", {}, wait_seconds=20)
    assert result.outcome == "lease_takeover" and result.waited_ms >= 500
    assert Attempt.objects.get(key="w6", outcome="lease_takeover").waited_ms == result.waited_ms


@pytest.fixture
def no_fallback_timer(monkeypatch):
    """The waiter's fallback timer pushed past every wait here: only a wake-up can end one early."""
    monkeypatch.setattr(waiting, "FIRST_INTERVAL", 30.0)
    monkeypatch.setattr(waiting, "MAX_INTERVAL", 30.0)


def _complete_in_child(key: str, token: int) -> None:
    # Once the waiter has asked for a NOTIFY (receipts/pg.py:announce_waiter): it waits.
    until(lambda: store.Receipt.objects.get(scope=SCOPE, key=key).waiters, "the waiter asks for a NOTIFY")
    store.complete(store.Held(SCOPE, key, token), body="from another process")
    connections.close_all()


@pytest.fixture
def wakeups(monkeypatch) -> list[bool]:
    """What each of this process's waits ended by: True a wake-up, False its timer."""
    ended: list[bool] = []
    wait = waiting.Wakeup.wait

    def recorded(wakeup: waiting.Wakeup, timeout: float) -> bool:
        woke = wait(wakeup, timeout)
        ended.append(woke)
        return woke

    monkeypatch.setattr(waiting.Wakeup, "wait", recorded)
    return ended


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_completion_in_another_process_wakes_the_waiter(no_fallback_timer, wakeups):
    # With the fallback timer pushed past the wait, only NOTIFY can wake the waiter early.
    first = store.claim(SCOPE, "w3", "email.send", {}, lease_seconds=60)
    waiting._ensure_listener()
    until(_listen_backends, "the listener connects before the notification is sent")
    connections.close_all()
    child = multiprocessing.get_context("fork").Process(target=_complete_in_child, args=("w3", first.token))
    child.start()
    result = store.claim(SCOPE, "w3", "email.send", {}, wait_seconds=25)
    child.join(10)
    assert result.outcome == "replayed"
    assert result.receipt.response_body == "from another process"
    assert wakeups == [True], "woken by the timer, not by NOTIFY"


END = "end of the test's notifications"


def _notifications_during(action) -> list[str]:
    """The NOTIFY payloads on the receipts channel while `action` runs. A notification of the
    test's own, sent after `action` has committed, ends the list: PostgreSQL delivers
    notifications in the order their transactions committed, so none of `action`'s comes later."""
    import psycopg

    params = connection.get_connection_params()
    conninfo = {k: params[k] for k in ("dbname", "user", "host", "port", "password") if params.get(k)}
    with psycopg.connect(autocommit=True, **conninfo) as listener:
        listener.execute(f"LISTEN {waiting.CHANNEL}")
        action()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [waiting.CHANNEL, END])
        payloads = []
        for note in listener.notifies(timeout=30):
            if note.payload == END:
                return payloads
            payloads.append(note.payload)
    raise AssertionError("the test's own notification never came")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_settling_a_receipt_nobody_waits_for_sends_no_notify():
    # A NOTIFY's commit takes a server-wide lock: the common case, nobody waiting, pays none.
    first = store.claim(SCOPE, "quiet", "email.send", {}, lease_seconds=60)
    assert _notifications_during(lambda: store.complete(store.Held(SCOPE, "quiet", first.token), body="done")) == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_waiter_asks_for_the_notify_that_wakes_it():
    first = store.claim(SCOPE, "heard", "email.send", {}, lease_seconds=60)
    waiter = threading.Thread(target=lambda: (store.claim(SCOPE, "heard", "email.send", {}, wait_seconds=5),
                                             connections.close_all()))
    waiter.start()
    until(lambda: store.Receipt.objects.get(key="heard").waiters, "the waiter asks for a NOTIFY")
    payloads = _notifications_during(lambda: store.complete(store.Held(SCOPE, "heard", first.token), body="done"))
    waiter.join(10)
    assert payloads == [waiting.topic(SCOPE, "heard")]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_waiter_that_arrives_during_the_settle_gets_the_result_without_a_notify(
    no_fallback_timer, wakeups
):
    # The settle has updated the row (no waiters yet, so no NOTIFY) but not committed. The
    # waiter's request for a NOTIFY waits on the row lock, then finds the row settled and
    # looks again at once: it never waits for a wake-up at all (a wait would be its timer's,
    # pushed past the claim's wait, or this process's wake-up at the settle's commit).
    first = store.claim(SCOPE, "race", "email.send", {}, lease_seconds=60)
    with uncommitted(lambda: store.complete(store.Held(SCOPE, "race", first.token), body="held")):
        answers: list[store.ClaimResult] = []
        waiter = threading.Thread(target=lambda: (answers.append(store.claim(SCOPE, "race", "email.send", {}, wait_seconds=20)),
                                                  connections.close_all()))
        waiter.start()
        until_transactions_wait_on_locks(1, "the waiter's request for a NOTIFY waits on the settle's row")
    waiter.join(30)
    (result,) = answers
    assert result.outcome == "replayed" and result.receipt.response_body == "held"
    assert wakeups == []


def _listen_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {waiting.CHANNEL}"],
        )
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_lost_listen_connection_is_one_warning_line_and_comes_back(caplog):
    waiting._ensure_listener()
    (backend,) = until(_listen_backends, "the listener connects")
    caplog.set_level("WARNING", logger="receipts.waiting")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    (again,) = until(lambda: [pid for pid in _listen_backends() if pid != backend], "the listener connects again")
    assert again != backend
    (record,) = [r for r in caplog.records if r.name == "receipts.waiting"]
    assert record.levelname == "WARNING" and record.exc_info is None
    message = record.getMessage()
    assert message.startswith("receipt LISTEN connection lost (") and "\n" not in message
    assert "server closed the connection" in message or "terminating connection" in message  # psycopg's reason


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_the_listener_connects_with_the_databases_options(monkeypatch):
    # OPTIONS is where sslmode, a service or certificates live: a listener built from NAME,
    # USER, HOST and PORT alone would connect where the app's connection could not.
    waiting.stop_listener()
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "application_name", "idemdash-listen-test")
    try:
        waiting._ensure_listener()
        (backend,) = until(_listen_backends, "the listener connects")
        with connection.cursor() as cursor:
            cursor.execute("SELECT application_name FROM pg_stat_activity WHERE pid = %s", [backend])
            assert cursor.fetchone() == ("idemdash-listen-test",)
    finally:
        waiting.stop_listener()


# --- the cap on waiters per process (RECEIPTS_MAX_WAITERS) ------------------------------------

def _wait_in_thread(key: str, results: list) -> threading.Thread:
    def run() -> None:
        try:
            results.append(store.claim(SCOPE, key, "email.send", {}, wait_seconds=20).outcome)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_past_the_cap_a_duplicate_is_refused_at_once_and_the_slot_comes_back(settings):
    settings.RECEIPTS_MAX_WAITERS = 1
    first = store.claim(SCOPE, "cap", "email.send", {}, lease_seconds=60)
    results: list[str] = []
    waiter = _wait_in_thread("cap", results)
    until(lambda: waiting.waiting_now() == 1, "the first duplicate waits")
    refused = store.claim(SCOPE, "cap", "email.send", {}, wait_seconds=20)
    # At once: refused a waiting slot, it did not wait at all, and its log line says so.
    assert refused.outcome == "in_progress" and refused.wait_refused and refused.waited_ms is None
    assert Attempt.objects.get(key="cap", outcome="in_progress").waited_ms is None
    assert waiting.waiting_now() == 1  # the refused caller took no slot
    store.complete(store.Held(SCOPE, "cap", first.token), body="done")
    waiter.join(10)
    assert results == ["replayed"]
    assert waiting.waiting_now() == 0
    # A slot given back is there for the next waiter of any key.
    second = store.claim(SCOPE, "cap-2", "email.send", {}, lease_seconds=60)
    waiter = _wait_in_thread("cap-2", results)
    until(lambda: waiting.waiting_now() == 1, "a waiter of another key takes the slot")
    store.complete(store.Held(SCOPE, "cap-2", second.token), body="done")
    waiter.join(10)
    assert results == ["replayed", "replayed"]


@pytest.mark.django_db(transaction=True)
def test_a_waiter_that_gives_up_gives_its_slot_back(settings):
    settings.RECEIPTS_MAX_WAITERS = 1
    store.claim(SCOPE, "cap-3", "email.send", {}, lease_seconds=60)
    assert store.claim(SCOPE, "cap-3", "email.send", {}, wait_seconds=0.2).outcome == "in_progress"
    assert waiting.waiting_now() == 0


@pytest.mark.django_db(transaction=True)
def test_with_no_slots_nobody_waits(settings, wakeups):
    settings.RECEIPTS_MAX_WAITERS = 0
    store.claim(SCOPE, "cap-4", "email.send", {}, lease_seconds=60)
    refused = store.claim(SCOPE, "cap-4", "email.send", {}, wait_seconds=20)
    assert refused.outcome == "in_progress" and refused.wait_refused and refused.waited_ms is None
    assert wakeups == []  # not one wait
