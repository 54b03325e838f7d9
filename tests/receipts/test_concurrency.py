"""Exactly one execution per key under real concurrency.

20 keys, 30 simultaneous callers for each: 5 OS processes x 6 threads, every thread with
its own database connection, every thread calling every key once in its own shuffled
order. The side effect is a line appended to a file per key (O_APPEND, shared by all
processes), so the count cannot be fooled by any one process's memory. A check-then-write
store fails this test; a single-threaded test could not tell.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connections

from receipts import store
from receipts.models import Attempt, Receipt
from tests.concurrently import in_threads_of_forked_processes

KEYS = [f"order-{i:02d}" for i in range(20)]
PROCESSES = 5
THREADS = 6  # 5 x 6 = 30 callers per key
OPERATION = "email.send"


def _caller(
    scope: str, effects: Path, wait: float, seed: int, start: threading.Barrier | None, out: list
) -> None:
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
                time.sleep(rng.uniform(0.005, 0.03))  # hold the lease while others arrive
                store.complete(scope, key, result.token, body=f"sent {key}")
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
    assert logged["replayed"] == by_outcome["replayed"]
    assert logged["in_progress"] == by_outcome["in_progress"]


@pytest.mark.django_db(transaction=True)
def test_callers_that_wait_get_the_replay_instead_of_a_conflict(tmp_path, settings):
    settings.RECEIPTS_MAX_WAITERS = THREADS  # every caller of a process may wait (the forks inherit it)
    results = _run("client:waiters", tmp_path, wait=20)
    _assert_once_per_key(tmp_path, "client:waiters")
    by_outcome = Counter(outcome for _, outcome in results)
    assert by_outcome == {"claimed": len(KEYS), "replayed": len(KEYS) * (PROCESSES * THREADS - 1)}


@pytest.mark.django_db(transaction=True)
def test_threads_alone_also_run_each_key_once(tmp_path):
    out: list = []
    barrier = threading.Barrier(30)
    threads = [
        threading.Thread(target=_caller, args=("client:threads", tmp_path, 0, t, barrier, out)) for t in range(30)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(out) == 30 * len(KEYS)
    _assert_once_per_key(tmp_path, "client:threads")
