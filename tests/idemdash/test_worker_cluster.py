"""idemdash/worker/cluster.py leans on django-q2 internals: these fail, naming the installed
django-q2 version, when an upgrade moves them. The behaviour itself is tested with real
processes in tests/faults/test_stop_qcluster.py."""

from __future__ import annotations

import inspect
import multiprocessing
import signal
import threading
from importlib.metadata import version

import pytest
from django.core.management import get_commands
from django_q import cluster as django_q_cluster
from django_q import monitor as django_q_monitor
from django_q import worker as django_q_worker

from idemdash.worker import cluster

DJANGO_Q2 = version("django-q2")


def source(obj) -> str:
    return inspect.getsource(obj)


@pytest.mark.parametrize(
    ("what", "obj", "expected"),
    [
        # Why the override exists: the sentinel, and what it forks, die at once on SIGTERM.
        ("Sentinel.__init__ resetting SIGTERM", django_q_cluster.Sentinel.__init__, "signal.signal(signal.SIGTERM, signal.SIG_DFL)"),
        ("Sentinel.__init__ starting only when asked", django_q_cluster.Sentinel.__init__, "if start:\n            self.start()"),
        ("the timer on each worker process", django_q_cluster.Sentinel.spawn_process, "p.timer = args[2]"),
        ("the SIGTERM to a timed-out worker", django_q_cluster.Sentinel.reincarnate, "if process.timer.value == 0:"),
        ("the sentinel's arguments", django_q_cluster.Cluster.start, "self.cluster_id,\n                self.broker,\n                self.timeout,"),
        ("Cluster.sig_handler stopping the cluster", django_q_cluster.Cluster.sig_handler, "self.stop()"),
        # What django-q2's guard loop calls, where cluster.py hooks in.
        ("Sentinel.start spawning, then guarding", django_q_cluster.Sentinel.start, "self.spawn_cluster()\n        self.guard()"),
        ("the guard's timer check under the timer's lock", django_q_cluster.Sentinel.guard, "with p.timer.get_lock():"),
        ("the guard reincarnating a dead or timed-out worker", django_q_cluster.Sentinel.guard,
         "if not p.is_alive() or p.timer.value == 0:\n                        self.reincarnate(p)"),
        ("the guard reincarnating a dead monitor", django_q_cluster.Sentinel.guard, "if not self.monitor.is_alive():\n                self.reincarnate(self.monitor)"),
        ("the guard reincarnating a dead pusher", django_q_cluster.Sentinel.guard, "if not self.pusher.is_alive():\n                self.reincarnate(self.pusher)"),
        ("the guard's wait for the stop event, once a cycle", django_q_cluster.Sentinel.guard, "if self.stop_event.wait(cycle):"),
        ("the guard stopping the sentinel", django_q_cluster.Sentinel.guard, "                break\n        self.stop()"),
        ("a worker added to the pool before it starts", django_q_cluster.Sentinel.spawn_process, "self.pool.append(p)\n        p.start()"),
        # The tick: a task package put straight into the task queue (liveness.tick_package).
        ("the worker's pre_execute signal", django_q_worker.worker, "pre_execute.send(sender=\"django_q\", func=f, task=task)"),
        ("the worker's per-task timeout", django_q_worker.worker, 'timer_value = task.pop("timeout", timeout)'),
        ("the monitor not saving a task marked save=False", django_q_monitor.save_task, 'if not task.get("save", Conf.SAVE_LIMIT >= 0) and task["success"]:'),
        ("the monitor acknowledging only a task with an ack id", django_q_monitor.monitor, 'ack_id = task.pop("ack_id", False)'),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 60 else "",
)
def test_the_django_q2_internals_the_clean_stop_relies_on_are_unchanged(what, obj, expected):
    assert expected in source(obj), (
        f"django-q2 {DJANGO_Q2} changed {what}; idemdash/worker/cluster.py was written against "
        "1.11.1: check it against the new version (tests/faults/test_stop_qcluster.py shows whether it still works)"
    )


def test_the_signature_of_the_sentinel_is_the_one_overridden():
    ours = inspect.signature(cluster.Sentinel.__init__)
    theirs = inspect.signature(django_q_cluster.Sentinel.__init__)
    assert list(ours.parameters) == list(theirs.parameters), f"django-q2 {DJANGO_Q2} changed Sentinel's arguments"


def test_manage_py_qcluster_runs_this_cluster():
    assert get_commands()["qcluster"] == "idemdash.worker"


def test_sigterm_is_ignored_by_a_process_of_the_cluster_other_than_a_timed_out_worker():
    previous = signal.signal(signal.SIGTERM, cluster._on_sigterm)
    try:
        signal.raise_signal(signal.SIGTERM)  # this process has no django-q2 timer: it lives on
    finally:
        signal.signal(signal.SIGTERM, previous)



class _Lost(Exception):
    pass


class _Sentinel:
    """What _GuardedTimer asks of its sentinel: `_lost`, which in the cluster ends the process."""

    def __init__(self) -> None:
        self.lost = []

    def _lost(self, process) -> None:
        self.lost.append(process)
        raise _Lost


class _DeadWorker:
    """A worker process as the guard sees one killed inside its timer lock: not alive (the
    lock it held is never given back; here this test holds it)."""

    exitcode = -9

    def is_alive(self) -> bool:
        return False


def test_a_worker_killed_inside_its_timer_lock_is_lost_instead_of_wedging_the_guard():
    lock = multiprocessing.get_context("fork").Lock()
    timer = multiprocessing.get_context("fork").Value("f", -1, lock=lock)
    lock.acquire()  # held by the dead worker, for good
    sentinel, worker = _Sentinel(), _DeadWorker()
    guarded = cluster._GuardedTimer(timer, worker, sentinel)
    with pytest.raises(_Lost), guarded.get_lock():
        pass  # django-q2's guard would wait here for good
    assert sentinel.lost == [worker]


def test_the_guard_reads_and_counts_down_a_live_workers_timer_through_its_guarded_lock():
    timer = multiprocessing.get_context("fork").Value("f", 10)
    guarded = cluster._GuardedTimer(timer, None, _Sentinel())
    with guarded.get_lock():  # free: taken at once, whoever the worker is
        guarded.value -= 0.5
    assert timer.value == 9.5
    assert timer.get_lock().acquire(block=False), "the lock was given back"
    timer.get_lock().release()


def test_the_tick_runs_before_each_wait_of_the_guard_on_the_stop_event():
    event = threading.Event()
    ticks = []
    each = cluster._EachCycle(event, lambda: ticks.append(event.is_set()))
    assert each.wait(0) is False and ticks == [False]
    event.set()
    assert each.is_set() and each.wait(0) is True and ticks == [False, True]
