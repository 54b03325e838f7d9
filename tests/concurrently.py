"""Running the same step from many threads or processes at the same moment, for the tests that
race operators, drainers or evaluators against each other (one copy of the thread and fork
plumbing, so each test says only what races and what it expects)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import connection, connections, transaction

from idemdash.core.models import AuditEntry
from tests.waits import until


def operators_at_once(n: int, row, act: Callable[..., Any], refused: type[Exception]) -> list[str]:
    """n operators (threads, each with its own connection) each read the row as they saw it,
    then call act(seen, actor=...) on it at the same moment. Returns the sorted outcomes,
    "done" or "refused"."""
    barrier = threading.Barrier(n)
    outcomes: list[str] = []

    def operator(i: int) -> None:
        try:
            seen = type(row).objects.get(pk=row.pk)
            barrier.wait()
            try:
                act(seen, actor=f"op{i}")
                outcomes.append("done")
            except refused:
                outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=operator, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(outcomes)


def in_threads(n: int, fn: Callable[[int], None], join: float = 60) -> None:
    """Call fn(i) for each i below n from n threads at the same moment (behind a barrier),
    each on its own connections, and wait for them."""
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait()
            fn(i)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(join)


def assert_one_of_eight_operators_acts(row, act: Callable[..., Any], refused: type[Exception], audit_action: str) -> None:
    """Eight operators acting on the same row at once: exactly one acts, and is audited once."""
    assert operators_at_once(8, row, act, refused) == ["done"] + ["refused"] * 7
    assert AuditEntry.objects.filter(action=audit_action).count() == 1


def in_forked_processes(target: Callable[..., None], args: list[tuple], timeout: float) -> list:
    """Fork one process per tuple in `args`, call target(*args, go, queue) in each, set `go` once
    all have started, and return every item each put on the queue (one list per process). Each
    process must exit cleanly."""
    connections.close_all()  # children must not share the parent's socket
    ctx = multiprocessing.get_context("fork")
    queue, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(*a, go, queue)) for a in args]
    for p in procs:
        p.start()
    go.set()
    results = [item for _ in procs for item in queue.get(timeout=timeout)]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    return results


def _threads_then_report(caller: Callable[..., None], threads: int, args: tuple, go, queue) -> None:
    out: list = []
    barrier = threading.Barrier(threads)
    started = [threading.Thread(target=caller, args=(*args, t, barrier, out)) for t in range(threads)]
    go.wait(30)
    for t in started:
        t.start()
    for t in started:
        t.join(120)
    queue.put(out)


def in_threads_of_forked_processes(caller: Callable[..., None], threads: int, args: list[tuple], timeout: float) -> list:
    """Fork one process per tuple in `args`, start `threads` threads in each calling
    caller(*args, thread_number, barrier, out) (the barrier lets a process's threads start
    together; each appends what it saw to `out`), and return everything every thread put
    in `out`."""
    return in_forked_processes(_threads_then_report, [(caller, threads, a) for a in args], timeout)


@contextmanager
def in_a_thread(fn: Callable[[], None], stop: threading.Event, join: float) -> Iterator[threading.Thread]:
    """Run fn in a thread, on its own connections, for the length of the block; then set `stop`
    (which fn watches) and wait up to `join` seconds for it to end."""

    def run() -> None:
        try:
            fn()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    try:
        yield thread
    finally:
        stop.set()
        thread.join(join)


def killed_once_it_reaches(target: Callable[..., None], args: tuple, reached: Path, timeout: float = 60) -> None:
    """Fork a process calling target(*args), wait until it creates the file `reached` (right
    after its effect, where it then sleeps), and kill it there with SIGKILL: a crash between
    the effect and its settling, with nothing cleaned up."""
    connections.close_all()  # the child must not share the parent's socket
    child = multiprocessing.get_context("fork").Process(target=target, args=args)
    child.start()
    deadline = time.monotonic() + timeout
    while not reached.exists() and time.monotonic() < deadline and child.is_alive():
        time.sleep(0.05)
    assert reached.exists(), "the child never reached its effect"
    os.kill(child.pid, signal.SIGKILL)
    child.join(10)
    assert child.exitcode == -signal.SIGKILL


# How many transactions wait on a row lock now, by database.
_LOCK_WAITS = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
    "mysql": "SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'",
}

# InnoDB fills information_schema.INNODB_TRX from a cache it refreshes only when the last read
# of it is more than 0.1 s old (trx0i_s.cc: CACHE_MIN_REFRESH_TIME_US, measured from the last
# read, not the last refresh): polled every 0.05 s it is never refreshed, and shows for ever
# the transactions of the first look (one of three waiting claims, in the deadlock proof).
_POLL_SECONDS = {"mysql": 0.25}


def until_transactions_wait_on_locks(count: int, what: str, within: float = 30) -> None:
    """Return once `count` transactions of other connections wait on a row lock (PostgreSQL,
    MySQL/MariaDB): the moment a test has arranged; AssertionError naming `what` if never."""
    def waiting() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(_LOCK_WAITS[connection.vendor])
            return cursor.fetchone()[0] >= count

    until(waiting, what, within=within, every=_POLL_SECONDS.get(connection.vendor, 0.05))


@contextmanager
def uncommitted(work: Callable[[], None], within: float = 30) -> Iterator[None]:
    """Run `work` in a transaction on a thread with its own connection and hold that
    transaction open while the block runs: its writes stay uncommitted (and their row locks
    held) until the block ends, when it commits."""
    done, commit = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold() -> None:
        try:
            with transaction.atomic():
                work()
                done.set()
                assert commit.wait(within), "the block never ended"
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            errors.append(exc)
            done.set()
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert done.wait(within), "the transaction's work never finished"
    try:
        if errors:
            raise errors[0]
        yield
    finally:
        commit.set()
        holder.join(within)
    if errors:
        raise errors[0]


def same_keys_at_once(post: Callable[[str], Any], keys: list[str], per_key: int) -> list[tuple[str, Any]]:
    """per_key threads for each key, released at one moment, each calling post(key) once (an
    HTTP request to a real server). Returns (key, response) for every call that answered."""
    answers: list[tuple[str, Any]] = []
    start = threading.Barrier(len(keys) * per_key)

    def caller(key: str) -> None:
        start.wait(30)
        answers.append((key, post(key)))

    threads = [threading.Thread(target=caller, args=(key,)) for key in keys for _ in range(per_key)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def assert_each_key_ran_once(answers: list[tuple[str, Any]], keys: list[str], per_key: int, log: str) -> None:
    """Every caller got the view's 201; per key one ran it and the rest were replayed the same
    body; and the view's side effect (a test.side_effect audit row) exists once per key."""
    assert len(answers) == len(keys) * per_key, log
    assert {response.status_code for _, response in answers} == {201}, log
    for key in keys:
        mine = [response for k, response in answers if k == key]
        assert len({response.content for response in mine}) == 1  # one result, replayed
        assert sum("Idempotent-Replayed" not in response.headers for response in mine) == 1
        assert AuditEntry.objects.filter(action="test.side_effect", object_id=key).count() == 1
