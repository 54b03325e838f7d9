"""Bulk runs (idemdash/core/bulk_runs.py): started, advanced by the worker in chunks, each row once
across racing threads and processes and after a SIGKILL, cancelled once, and their progress read
from the rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import QuerySet
from django.utils import timezone

from idemdash.core import bulk_runs

pytestmark = pytest.mark.django_db


# --- bulk runs (start, advance, cancel, progress, resume), over dead outbox messages ---------

import multiprocessing  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402

from django.db import connection, connections  # noqa: E402

from idemdash.core.bulk_runs import BulkItem, BulkRun  # noqa: E402
from idemdash.core.models import AuditEntry  # noqa: E402
from receipts.outbox import drain  # noqa: E402
from receipts.outbox import store as outbox_store  # noqa: E402
from receipts.outbox.models import OutboxMessage  # noqa: E402
from tests.dashboard.build import outbox_message  # noqa: E402
from tests.waits import until  # noqa: E402

SEND_AGAIN = "outbox_message.send_again"


def dead_messages(n: int) -> QuerySet:
    """n dead messages (email.send, which the test settings' mail backend always takes): one
    made dead by the drain's own functions, the rest copies of it under their own keys."""
    first = outbox_message("bulk-0000", "dead")
    copies = []
    for i in range(1, n):
        copy = OutboxMessage.objects.get(pk=first.pk)
        copy.pk, copy.key = None, f"bulk-{i:04d}"
        copies.append(copy)
    OutboxMessage.objects.bulk_create(copies)
    return OutboxMessage.objects.filter(key__startswith="bulk-")


def start_run(rows: QuerySet, **kw: Any) -> BulkRun:
    return bulk_runs.start("message", rows, actor="otto", reason="the mail relay is back", **kw)


def assert_each_row_acted_on_exactly_once(run: BulkRun) -> None:
    done = set(run.items.filter(status=BulkItem.Status.DONE).values_list("object_id", flat=True))
    audited = list(AuditEntry.objects.filter(action=SEND_AGAIN, run=run).values_list("object_id", flat=True))
    assert sorted(audited) == sorted(str(pk) for pk in done), "an item done without its action, or twice"
    assert set(OutboxMessage.objects.filter(pk__in=done).values_list("status", flat=True)) <= {"pending"}


def test_start_writes_the_run_and_its_items_named_by_key_with_one_audit_entry(django_user_model):
    dead_messages(3)
    outbox_message("sent-one", "sent")
    run = start_run(OutboxMessage.objects.all())
    assert (run.status, run.total, run.title, run.actor) == ("queued", 3, "Send again 3 dead messages", "otto")
    assert list(run.items.order_by("id").values_list("name", "status")) == [
        ("bulk-0000", "pending"), ("bulk-0001", "pending"), ("bulk-0002", "pending")]
    (entry,) = AuditEntry.objects.all()
    assert (entry.action, entry.object_name, entry.run, entry.status_after) == (
        "bulk_run.start", "Send again 3 dead messages", None, "queued")


def test_advance_acts_on_each_item_once_with_its_audit_entry_in_the_run_and_finishes_it():
    run = start_run(dead_messages(5))
    assert bulk_runs.advance(run.pk) == 5
    run.refresh_from_db()
    assert run.status == "finished" and run.finished_at is not None
    assert_each_row_acted_on_exactly_once(run)
    assert run.items.filter(status="done").count() == 5
    assert bulk_runs.advance(run.pk) == 0  # a second task on a finished run does nothing
    assert AuditEntry.objects.filter(action=SEND_AGAIN).count() == 5


def test_a_row_that_changed_since_the_start_is_skipped_and_says_why():
    rows = dead_messages(3)
    run = start_run(rows)
    outbox_store.send_again(rows.get(key="bulk-0001"), actor="ada")  # another operator got there first
    assert bulk_runs.advance(run.pk) == 2
    (skipped,) = run.items.filter(status="refused")
    assert skipped.name == "bulk-0001" and "no longer a dead message" in skipped.detail
    assert AuditEntry.objects.filter(action=SEND_AGAIN, object_name="bulk-0001").count() == 1  # ada's only


def test_progress_follows_each_row_from_requeued_to_sent_or_dead_until_all_settled():
    run = start_run(dead_messages(4))
    p = bulk_runs.progress(run)
    assert (p.total, p.pending, p.done, p.waiting, p.over) == (4, 4, 0, 0, False)
    bulk_runs.advance(run.pk)
    run.refresh_from_db()
    p = bulk_runs.progress(run)
    # Requeued is not sent: every row is waiting for its outcome.
    assert (p.done, p.outcomes, p.settled, p.waiting, p.over) == (4, [("pending", 4)], 0, 4, False)
    (claimed,) = outbox_store.claim_batch("test-drainer", batch_size=1)
    outbox_store.mark_failed(claimed, "HTTP 403: forbidden", permanent=True, status_code=403, drainer="test-drainer")
    p = bulk_runs.progress(run)
    assert (p.outcomes, p.settled, p.waiting) == ([("dead", 1), ("pending", 3)], 1, 3)
    drain.drain(max_seconds=10)
    p = bulk_runs.progress(run)
    assert (p.outcomes, p.settled, p.waiting, p.over) == ([("sent", 3), ("dead", 1)], 4, 0, True)


def test_cancel_is_conditional_idempotent_and_audited_once_and_no_item_is_taken_after_it():
    run = start_run(dead_messages(4))
    assert bulk_runs.cancel(run, actor="ada") is True
    assert bulk_runs.cancel(run, actor="ada") is False
    assert bulk_runs.cancel(BulkRun.objects.get(pk=run.pk), actor="bob") is False
    assert AuditEntry.objects.filter(action="bulk_run.cancel").count() == 1
    assert bulk_runs.advance(run.pk) == 0
    run.refresh_from_db()
    p = bulk_runs.progress(run)
    assert (run.status, run.cancelled_by, p.untouched, p.over) == ("cancelled", "ada", 4, True)
    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {"dead"}


def test_a_finished_run_cannot_be_cancelled():
    run = start_run(dead_messages(1))
    bulk_runs.advance(run.pk)
    assert bulk_runs.cancel(BulkRun.objects.get(pk=run.pk), actor="ada") is False
    assert not AuditEntry.objects.filter(action="bulk_run.cancel").exists()


def test_a_long_run_hands_the_rest_to_a_fresh_task_after_its_time(monkeypatch):
    run = start_run(dead_messages(3))
    monkeypatch.setattr(bulk_runs, "CHUNK", 1)
    queued = []
    monkeypatch.setattr(bulk_runs, "enqueue", queued.append)
    assert bulk_runs.advance(run.pk, seconds=0.0001) == 1  # one chunk, then out of time
    assert queued == [run.pk] and BulkRun.objects.get(pk=run.pk).status == "running"


def test_resume_stalled_hands_back_only_active_runs_no_worker_touched_lately(monkeypatch, time_machine):
    queued = []
    monkeypatch.setattr(bulk_runs, "enqueue", queued.append)
    time_machine.move_to(timezone.now(), tick=False)
    stalled = start_run(dead_messages(2))
    done = start_run(OutboxMessage.objects.none())
    bulk_runs.advance(done.pk)
    time_machine.shift(bulk_runs.STALLED_AFTER + timedelta(seconds=1))
    fresh = start_run(OutboxMessage.objects.none())
    assert bulk_runs.resume_stalled() == [stalled.pk] and queued == [stalled.pk]
    assert bulk_runs.resume_stalled() == []  # touched: not handed back twice
    assert fresh.pk not in queued


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_on_one_run_in_threads_take_each_item_once():
    run = start_run(dead_messages(60))
    barrier = threading.Barrier(2)
    acted: list[int] = []

    def worker() -> None:
        try:
            barrier.wait()
            acted.append(bulk_runs.advance(run.pk))
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(acted) == 60
    assert_each_row_acted_on_exactly_once(run)


def _advance_in_child(run_id: int, go) -> None:
    go.wait(30)
    bulk_runs.advance(run_id, seconds=600)
    os._exit(0)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_worker_processes_racing_on_one_run_take_each_item_once():
    run = start_run(dead_messages(60))
    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    procs = [ctx.Process(target=_advance_in_child, args=(run.pk, go)) for _ in range(2)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert run.items.filter(status="done").count() == 60
    assert_each_row_acted_on_exactly_once(run)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_run_loses_no_item_and_the_resumed_run_does_none_twice(time_machine):
    rows = dead_messages(400)
    run = start_run(rows)
    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    go = ctx.Event()
    child = ctx.Process(target=_advance_in_child, args=(run.pk, go))
    child.start()
    go.set()
    until(lambda: run.items.filter(status="done").count() >= 30, "30 items done", within=60, every=0.01)
    os.kill(child.pid, signal.SIGKILL)  # wherever it is: between items or inside one's transaction
    child.join(10)
    done_at_kill = run.items.filter(status="done").count()
    assert 30 <= done_at_kill < 400, "the kill came after the run ended: nothing was proven"
    assert_each_row_acted_on_exactly_once(run)  # what the killed worker committed is whole
    assert rows.filter(status="dead").count() == 400 - done_at_kill  # the rest untouched
    # The run stalls; a minute later the sweep hands it to a worker, which finishes it.
    time_machine.move_to(timezone.now() + bulk_runs.STALLED_AFTER + timedelta(seconds=1), tick=True)
    assert bulk_runs.resume_stalled() == [run.pk]
    assert bulk_runs.advance(run.pk) == 400 - done_at_kill
    assert run.items.filter(status="done").count() == 400
    assert_each_row_acted_on_exactly_once(run)
    assert BulkRun.objects.get(pk=run.pk).status == "finished"
