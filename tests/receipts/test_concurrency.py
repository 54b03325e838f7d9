"""Exactly one execution per key under real concurrency.

20 keys, 30 simultaneous callers for each: 5 OS processes x 6 threads, every thread with
its own database connection, every thread calling every key once in its own shuffled
order. The side effect is a line appended to a file per key (O_APPEND, shared by all
processes), so the count cannot be fooled by any one process's memory. A check-then-write
store fails this test; a single-threaded test could not tell.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connections
from django.test import Client

from idemdash.core.clients import create_token
from idemdash.dashboard import queries
from receipts import store, waiting
from receipts.models import Attempt, Receipt
from tests.concurrently import in_threads_of_forked_processes
from tests.waits import until

KEYS = [f"order-{i:02d}" for i in range(20)]
PROCESSES = 5
THREADS = 6  # 5 x 6 = 30 callers per key
OPERATION = "email.send"


def _caller(
    scope: str, effects: Path, wait: float, seed: int, start: threading.Barrier | None, out: list,
    hold: Callable[[str], None] | None = None,
) -> None:
    """Claim every key once, in an order of the seed's. A claim that owns its key makes the
    side effect and holds the lease while others arrive: `hold(key)`, else a moment of the
    seed's (in forked processes, which share no memory to say when others came)."""
    rng = random.Random(seed)
    keys = KEYS[:]
    rng.shuffle(keys)
    try:
        if start is not None:
            start.wait()
        for key in keys:
            result = store.claim(scope, key, OPERATION, {"key": key}, wait_seconds=wait)
            if result.owned:
                with open(effects / key, "a") as f:  # the side effect
                    f.write(f"{os.getpid()}:{threading.get_ident()}\n")
                if hold is not None:
                    hold(key)
                else:
                    time.sleep(rng.uniform(0.005, 0.03))
                store.complete(store.Held(scope, key, result.token), body=f"sent {key}")
            out.append((key, result.outcome))
    finally:
        connections.close_all()


def _run(scope: str, effects: Path, wait: float) -> list[tuple[str, str]]:
    # Each process's threads get seeds of their own: the process number times 100, plus the
    # thread's (in _caller's `seed`, after fork).
    return in_threads_of_forked_processes(
        _seeded_caller, THREADS, [(scope, effects, wait, p) for p in range(PROCESSES)], timeout=180
    )


def _seeded_caller(scope: str, effects: Path, wait: float, process: int, thread: int, start, out: list) -> None:
    _caller(scope, effects, wait, process * 100 + thread, start, out)


def _assert_once_per_key(effects: Path, scope: str) -> None:
    for key in KEYS:
        lines = (effects / key).read_text().splitlines()
        assert len(lines) == 1, f"{key} ran {len(lines)} times: {lines}"
    done = Receipt.objects.filter(scope=scope, status="completed").count()
    assert done == len(KEYS)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_thirty_callers_per_key_from_processes_and_threads_run_each_key_once(tmp_path):
    results = _run("client:race", tmp_path, wait=0)
    assert len(results) == len(KEYS) * PROCESSES * THREADS
    _assert_once_per_key(tmp_path, "client:race")
    by_outcome = Counter(outcome for _, outcome in results)
    assert by_outcome["claimed"] == len(KEYS)
    assert set(by_outcome) <= {"claimed", "replayed", "in_progress"}
    # The log agrees with what the callers saw.
    logged = Counter(Attempt.objects.filter(scope="client:race").values_list("outcome", flat=True))
    assert logged["claimed"] == len(KEYS)
    # A replay whose claim met the first attempt's insert committing meanwhile (PostgreSQL)
    # arrived with it: logged as the concurrent duplicate it is, `waited`.
    assert logged["replayed"] + logged["waited"] == by_outcome["replayed"]
    assert logged["in_progress"] == by_outcome["in_progress"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_callers_that_wait_get_the_replay_instead_of_a_conflict(tmp_path, settings):
    settings.RECEIPTS_MAX_WAITERS = THREADS  # every caller of a process may wait (the forks inherit it)
    results = _run("client:waiters", tmp_path, wait=20)
    _assert_once_per_key(tmp_path, "client:waiters")
    by_outcome = Counter(outcome for _, outcome in results)
    assert by_outcome == {"claimed": len(KEYS), "replayed": len(KEYS) * (PROCESSES * THREADS - 1)}
    # The log tells a caller that waited for the running first attempt from one that came
    # after it (which of the two each was depends on the timing; together they are all).
    logged = Counter(Attempt.objects.filter(scope="client:waiters").values_list("outcome", flat=True))
    assert logged["claimed"] == len(KEYS)
    assert logged["waited"] + logged["replayed"] == by_outcome["replayed"]


# One key, one first attempt that runs until every other caller is waiting for it: callers in
# this process (threads) and in forked processes (threads there too), each on its own connection.
WAITING_PROCESSES = 3
WAITERS_PER_PROCESS = 3
LOCAL_WAITERS = 4
DUPLICATES = WAITING_PROCESSES * WAITERS_PER_PROCESS + LOCAL_WAITERS


def _wait_for_the_first(scope: str, out: list) -> None:
    try:
        out.append(store.claim(scope, "simultaneous", OPERATION, {"to": "a@example.com"}, wait_seconds=60).outcome)
    finally:
        connections.close_all()


def _waiting_process(scope: str, ready, results) -> None:
    out: list = []
    threads = [threading.Thread(target=_wait_for_the_first, args=(scope, out)) for _ in range(WAITERS_PER_PROCESS)]
    for t in threads:
        t.start()
    until(lambda: waiting.waiting_now() == WAITERS_PER_PROCESS, "this process's callers wait", within=60, every=0.01)
    ready.put(os.getpid())
    for t in threads:
        t.join(120)
    results.put(out)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_simultaneous_callers_that_wait_are_counted_as_concurrent_duplicates_with_their_wait(settings):
    settings.RECEIPTS_MAX_WAITERS = LOCAL_WAITERS  # every caller of a process may wait (the forks inherit it)
    scope = "client:simultaneous"
    first = store.claim(scope, "simultaneous", OPERATION, {"to": "a@example.com"}, lease_seconds=120)
    assert first.outcome == "claimed"
    connections.close_all()  # the children must not share this process's socket
    ctx = multiprocessing.get_context("fork")
    ready, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_waiting_process, args=(scope, ready, results)) for _ in range(WAITING_PROCESSES)]
    for p in procs:
        p.start()
    out: list = []
    threads = [threading.Thread(target=_wait_for_the_first, args=(scope, out)) for _ in range(LOCAL_WAITERS)]
    for t in threads:
        t.start()
    # Every caller has been told "in progress" and holds a waiting slot before the first
    # attempt completes: each of them met the key while it ran.
    for _ in procs:
        ready.get(timeout=60)
    until(lambda: waiting.waiting_now() == LOCAL_WAITERS, "this process's callers wait", within=60, every=0.01)
    store.complete(store.Held(scope, "simultaneous", first.token), body="sent once")
    for t in threads:
        t.join(120)
    outcomes = out + [o for _ in procs for o in results.get(timeout=120)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0

    # Each caller got the first attempt's result...
    assert outcomes == ["replayed"] * DUPLICATES
    # ...and the log says they waited for it, and how long.
    log = list(Attempt.objects.filter(scope=scope).values_list("outcome", "waited_ms"))
    assert Counter(outcome for outcome, _ in log) == {"claimed": 1, "waited": DUPLICATES, "completed": 1}
    waits = [ms for outcome, ms in log if outcome == "waited"]
    assert all(ms > 0 for ms in waits), waits
    assert [ms for outcome, ms in log if outcome != "waited"] == [None, None]

    # Counted as concurrent duplicates wherever 409s were: the stats document, /api/v1/stats, /metrics.
    stats = queries.receipt_stats(queries.WINDOWS["1h"])
    assert (stats["requests"], stats["claimed"], stats["replayed"]) == (DUPLICATES + 1, 1, 0)
    assert stats["concurrent_duplicates"] == stats["waited"] == DUPLICATES
    assert stats["duplicate_rate"] == round(DUPLICATES / (DUPLICATES + 1), 4)
    auth = {"Authorization": f"Bearer {create_token('stats')[1]}"}
    document = Client().get("/api/v1/stats", {"window": "1h"}, headers=auth).json()
    assert document["receipts"]["concurrent_duplicates"] == document["receipts"]["waited"] == DUPLICATES
    metrics = Client().get("/metrics", headers=auth).content.decode()
    # Prometheus' counter by outcome: the waiters, none of them a 409.
    assert f'idemdash_receipt_claims_total{{outcome="waited"}} {float(DUPLICATES)}\n' in metrics
    assert 'outcome="in_progress"' not in metrics


@pytest.mark.django_db(transaction=True)
def test_threads_alone_also_run_each_key_once(tmp_path):
    out: list = []
    barrier = threading.Barrier(30)

    def until_another_caller_meets_it(key: str) -> None:
        # Every other caller comes to every key: the first that comes while this one holds it
        # is told in_progress (30 callers for 20 keys: some are always free to come).
        until(lambda: (key, "in_progress") in out, f"another caller meets {key} running")

    threads = [
        threading.Thread(target=_caller, args=("client:threads", tmp_path, 0, t, barrier, out, until_another_caller_meets_it))
        for t in range(30)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(out) == 30 * len(KEYS)
    _assert_once_per_key(tmp_path, "client:threads")
    by_outcome = Counter(outcome for _, outcome in out)
    assert by_outcome["claimed"] == len(KEYS) and by_outcome["in_progress"] >= len(KEYS)
