"""`wait_seconds` / `Prefer: wait`: the waiter is woken by the first attempt's completion,
not by a tight polling loop on the database."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext

from receipts import store, waiting
from receipts.models import Attempt

SCOPE = "client:wait"


def _complete_later(key: str, token: int, delay: float) -> None:
    time.sleep(delay)
    try:
        store.complete(SCOPE, key, token, body="done")
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_waiter_gets_the_replay_and_reads_the_database_only_a_few_times():
    first = store.claim(SCOPE, "w1", "email.send", {}, lease_seconds=60)
    worker = threading.Thread(target=_complete_later, args=("w1", first.token, 1.5))
    worker.start()
    with CaptureQueriesContext(connection) as queries:
        result = store.claim(SCOPE, "w1", "email.send", {}, wait_seconds=20)
    worker.join()
    assert result.outcome == "replayed"
    assert result.receipt.response_body == "done"
    # Every look at the key reads it: a SELECT, or on PostgreSQL the claim-or-replay statement.
    receipt_reads = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("SELECT", "WITH"))]
    # A tight loop would read hundreds of times in 1.5 s; the growing timer reads a handful.
    assert len(receipt_reads) <= 10, len(receipt_reads)


@pytest.mark.django_db(transaction=True)
def test_a_waiter_gives_up_with_in_progress_after_its_wait_and_the_log_keeps_its_wait():
    store.claim(SCOPE, "w2", "email.send", {}, lease_seconds=60)
    result = store.claim(SCOPE, "w2", "email.send", {}, wait_seconds=0.3)
    # About the 0.3 s it asked for (counted from the end of its first look; not asserted:
    # timings are the bench's, not the suite's).
    assert result.outcome == "in_progress" and result.waited_ms > 0
    # Answered 409 after its wait: an in_progress line (a concurrent duplicate either way).
    logged = Attempt.objects.filter(key="w2").exclude(outcome="claimed").get()
    assert (logged.outcome, logged.waited_ms) == ("in_progress", result.waited_ms)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_waiter_answered_with_the_result_is_logged_as_waited_not_replayed():
    first = store.claim(SCOPE, "w5", "email.send", {}, lease_seconds=60)
    worker = threading.Thread(target=_complete_later, args=("w5", first.token, 0.5))
    worker.start()
    result = store.claim(SCOPE, "w5", "email.send", {}, wait_seconds=20)
    worker.join()
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
    time.sleep(1.0)
    store.complete(SCOPE, key, token, body="from another process")
    connections.close_all()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_completion_in_another_process_wakes_the_waiter(no_fallback_timer):
    # With the fallback timer pushed past the wait, only NOTIFY can wake the waiter early.
    first = store.claim(SCOPE, "w3", "email.send", {}, lease_seconds=60)
    waiting._ensure_listener()
    time.sleep(0.5)  # let the listener connect before the notification is sent
    connections.close_all()
    child = multiprocessing.get_context("fork").Process(target=_complete_in_child, args=("w3", first.token))
    child.start()
    started = time.monotonic()
    result = store.claim(SCOPE, "w3", "email.send", {}, wait_seconds=25)
    waited = time.monotonic() - started
    child.join(10)
    assert result.outcome == "replayed"
    assert result.receipt.response_body == "from another process"
    assert waited < 15, f"woken by the timer after {waited:.1f}s, not by NOTIFY"


def _notifications_during(action, seconds: float = 0.5) -> list[str]:
    """The NOTIFY payloads on the receipts channel while `action` runs (and briefly after)."""
    import psycopg

    params = connection.get_connection_params()
    conninfo = {k: params[k] for k in ("dbname", "user", "host", "port", "password") if params.get(k)}
    with psycopg.connect(autocommit=True, **conninfo) as listener:
        listener.execute(f"LISTEN {waiting.CHANNEL}")
        action()
        return [note.payload for note in listener.notifies(timeout=seconds)]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_settling_a_receipt_nobody_waits_for_sends_no_notify():
    # A NOTIFY's commit takes a server-wide lock: the common case, nobody waiting, pays none.
    first = store.claim(SCOPE, "quiet", "email.send", {}, lease_seconds=60)
    assert _notifications_during(lambda: store.complete(SCOPE, "quiet", first.token, body="done")) == []


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_waiter_asks_for_the_notify_that_wakes_it():
    first = store.claim(SCOPE, "heard", "email.send", {}, lease_seconds=60)
    waiter = threading.Thread(target=lambda: (store.claim(SCOPE, "heard", "email.send", {}, wait_seconds=5),
                                             connections.close_all()))
    waiter.start()
    deadline = time.monotonic() + 5
    while not store.Receipt.objects.get(key="heard").waiters and time.monotonic() < deadline:
        time.sleep(0.02)
    payloads = _notifications_during(lambda: store.complete(SCOPE, "heard", first.token, body="done"))
    waiter.join(10)
    assert payloads == [waiting.topic(SCOPE, "heard")]


def _settle_and_hold(key: str, token: int, settled, release) -> None:
    """In another process (no in-process wake-up): complete inside a transaction that
    stays open until `release`, so the row stays locked meanwhile."""
    from django.db import transaction

    try:
        with transaction.atomic():
            store.complete(SCOPE, key, token, body="held")
            settled.set()
            release.wait(10)
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_waiter_that_arrives_during_the_settle_gets_the_result_without_a_notify(no_fallback_timer):
    # The settle has updated the row (no waiters yet, so no NOTIFY) but not committed. The
    # waiter's request for a NOTIFY waits on the row lock, then finds the row settled and
    # looks again at once: with the timer pushed past the wait, nothing else could wake it.
    first = store.claim(SCOPE, "race", "email.send", {}, lease_seconds=60)
    fork = multiprocessing.get_context("fork")
    settled, release = fork.Event(), fork.Event()
    connections.close_all()
    holder = fork.Process(target=_settle_and_hold, args=("race", first.token, settled, release))
    holder.start()
    assert settled.wait(10)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    result = store.claim(SCOPE, "race", "email.send", {}, wait_seconds=20)
    holder.join(10)
    assert result.outcome == "replayed" and result.receipt.response_body == "held"
    assert time.monotonic() - started < 5


def _listen_backends() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {waiting.CHANNEL}"],
        )
        return [pid for (pid,) in cursor.fetchall()]


def _until(predicate, seconds: float = 10):
    deadline = time.monotonic() + seconds
    while not (found := predicate()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return found


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_lost_listen_connection_is_one_warning_line_and_comes_back(caplog):
    waiting._ensure_listener()
    (backend,) = _until(_listen_backends)
    caplog.set_level("WARNING", logger="receipts.waiting")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    (again,) = _until(lambda: [pid for pid in _listen_backends() if pid != backend])
    assert again != backend
    (record,) = [r for r in caplog.records if r.name == "receipts.waiting"]
    assert record.levelname == "WARNING" and record.exc_info is None
    message = record.getMessage()
    assert message.startswith("receipt LISTEN connection lost (") and "\n" not in message
    assert "server closed the connection" in message or "terminating connection" in message  # psycopg's reason


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


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_past_the_cap_a_duplicate_is_refused_at_once_and_the_slot_comes_back(settings):
    settings.RECEIPTS_MAX_WAITERS = 1
    first = store.claim(SCOPE, "cap", "email.send", {}, lease_seconds=60)
    results: list[str] = []
    waiter = _wait_in_thread("cap", results)
    _until(lambda: waiting.waiting_now() == 1)
    started = time.monotonic()
    refused = store.claim(SCOPE, "cap", "email.send", {}, wait_seconds=20)
    assert refused.outcome == "in_progress" and time.monotonic() - started < 1.0
    assert waiting.waiting_now() == 1  # the refused caller took no slot
    store.complete(SCOPE, "cap", first.token, body="done")
    waiter.join(10)
    assert results == ["replayed"]
    assert waiting.waiting_now() == 0
    # A slot given back is there for the next waiter of any key.
    second = store.claim(SCOPE, "cap-2", "email.send", {}, lease_seconds=60)
    waiter = _wait_in_thread("cap-2", results)
    _until(lambda: waiting.waiting_now() == 1)
    store.complete(SCOPE, "cap-2", second.token, body="done")
    waiter.join(10)
    assert results == ["replayed", "replayed"]


@pytest.mark.django_db(transaction=True)
def test_a_waiter_that_gives_up_gives_its_slot_back(settings):
    settings.RECEIPTS_MAX_WAITERS = 1
    store.claim(SCOPE, "cap-3", "email.send", {}, lease_seconds=60)
    assert store.claim(SCOPE, "cap-3", "email.send", {}, wait_seconds=0.2).outcome == "in_progress"
    assert waiting.waiting_now() == 0


@pytest.mark.django_db(transaction=True)
def test_with_no_slots_nobody_waits(settings):
    settings.RECEIPTS_MAX_WAITERS = 0
    store.claim(SCOPE, "cap-4", "email.send", {}, lease_seconds=60)
    started = time.monotonic()
    assert store.claim(SCOPE, "cap-4", "email.send", {}, wait_seconds=20).outcome == "in_progress"
    assert time.monotonic() - started < 1.0
