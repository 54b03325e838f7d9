"""idemdash/worker/cluster.py leans on django-q2 internals: these fail, naming the installed
django-q2 version, when an upgrade moves them. The behaviour itself is tested with real
processes in tests/faults/test_stop_qcluster.py."""

from __future__ import annotations

import inspect
import signal
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
        # Sentinel.guard is re-implemented (cluster.py): what it repeats of django-q2's.
        ("Sentinel.start spawning, then guarding", django_q_cluster.Sentinel.start, "self.spawn_cluster()\n        self.guard()"),
        ("the guard's timer check under the timer's lock", django_q_cluster.Sentinel.guard, "with p.timer.get_lock():"),
        ("the guard's scheduler call", django_q_cluster.Sentinel.guard, "if counter >= 30 and Conf.SCHEDULER:"),
        ("the guard's wait for the stop event", django_q_cluster.Sentinel.guard, "if self.stop_event.wait(cycle):"),
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

