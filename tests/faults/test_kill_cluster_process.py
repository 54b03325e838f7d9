"""SIGKILL one process of a real `manage.py qcluster` (two workers, the database broker), at
each point where django-q2 can leave the cluster's shared queues locked or half-written, and
check that the cluster takes work again and still stops on SIGTERM.

The roles and points: each of the two workers while idle (the one inside the task queue's
get(), holding its lock and blocked reading the queue's pipe, and the one waiting for that
lock; told apart by the system call each is blocked in), a worker in the middle of a task,
the monitor, the pusher, and the sentinel; and the main process, after which no process of
the cluster may be left running. Unmodified django-q2 (1.11) wedges for good
when the worker inside get() dies: its replacement waits forever for the lock the dead
process held, the scheduler keeps running, and a SIGTERM never finishes.

Bounded: every wait has a deadline, and the cluster's process group is killed in `finally`.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from django.db import connection
from django_q.tasks import async_task

from idemdash.worker.models import ClusterHeartbeat
from tests.qcluster import group_alive, kill_process, signal_stop, start_qcluster
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

# Deadlines, not bounds: from the kill to a new task done the sentinel notices within its
# one-second guard cycle, the cluster's processes start again, the pusher polls every half
# second; a few seconds on a quiet machine. A SIGTERM stops it within a few seconds too; the
# documented units give it 90 (TimeoutStopSec).
BACK_WITHIN = 60
STOP_BOUND = 60
# x86-64 and arm64 system call numbers (/proc/PID/syscall's first field) of an idle worker:
# read(2) on the task queue's pipe, inside get() with its lock held, or futex(2) waiting for that lock.
IDLE_CALLS = {"holding": {"0", "63"}, "waiting": {"202", "98"}}


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def roles(log: Path, sentinel: int) -> dict[str, list[int]]:
    """The live processes of the sentinel's current generation, by role, from their log lines."""
    live = set(children(sentinel))
    text = log.read_text()
    found: dict[str, list[int]] = {"worker": [], "monitor": [], "pusher": []}
    for role, pattern in (("worker", r"ready for work at (\d+)"), ("monitor", r"monitoring at (\d+)"),
                          ("pusher", r"pushing tasks at (\d+)")):
        found[role] = [pid for pid in map(int, re.findall(pattern, text)) if pid in live]
    return found


def sentinel_of(cluster) -> int:
    (sentinel,) = children(cluster.pid)
    return sentinel


def started(cluster, log: Path) -> tuple[int, dict[str, list[int]]]:
    def ready():
        if "running." not in log.read_text():
            return None
        sentinel = sentinel_of(cluster)
        found = roles(log, sentinel)
        return (sentinel, found) if len(found["worker"]) == 2 and found["monitor"] and found["pusher"] else None

    return until(ready, "the cluster to start", within=60, log=log)


def blocked_in(pid: int) -> str | None:
    """The number of the system call `pid` is blocked in; None while it runs."""
    try:
        call = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return None if call == "running" else call


def idle_workers(workers: list[int]) -> dict[str, int] | None:
    """{"holding": the worker inside the task queue's get(), "waiting": the one waiting for its
    lock}, once both are back there; None before."""
    found = {}
    for pid in workers:
        call = blocked_in(pid)
        state = next((state for state, calls in IDLE_CALLS.items() if call in calls), None)
        if state is None or state in found:
            return None
        found[state] = pid
    return found


def runs_a_task(tmp_path: Path, log: Path, name: str) -> None:
    done = tmp_path / name
    async_task("tests.faults.probe_tasks.mark", str(done))
    until(done.exists, f"a task run after the kill ({name})", within=BACK_WITHIN, log=log)


@pytest.mark.parametrize("role", ["worker holding the queue", "worker waiting for the queue", "worker mid-task",
                                  "monitor", "pusher", "sentinel"])
def test_a_cluster_with_a_process_killed_takes_work_again_and_still_stops(tmp_path, role):
    log = tmp_path / "qcluster.log"
    cluster = start_qcluster(log, Q_WORKERS="2", LOG_LEVEL="INFO")
    try:
        sentinel, found = started(cluster, log)
        runs_a_task(tmp_path, log, "before")  # both workers have been through get() by now
        # Both back in get(): one reading the queue's pipe, the other waiting for its lock.
        idle = until(lambda: idle_workers(found["worker"]), "both workers idle in the task queue's get()", within=30,
                     log=log)
        if role == "worker mid-task":
            slow = tmp_path / "slow"
            async_task("tests.faults.probe_tasks.slow_mark", str(slow), 30)
            victim = int(until(lambda: Path(str(slow) + ".started").exists() and Path(str(slow) + ".started").read_text(), "the slow task", within=30, log=log))
        elif role == "sentinel":
            victim = sentinel
        elif role.startswith("worker"):
            victim = idle[role.split()[1]]
        else:
            (victim,) = found[role]
        os.kill(victim, signal.SIGKILL)

        # Not one process replaced on the old queues, as django-q2 does, but all started afresh;
        # then the new processes take work.
        said = "its sentinel exited with code -9" if role == "sentinel" else "died (exit code -9)"
        until(lambda: said in log.read_text(), "the cluster to see the death", within=BACK_WITHIN, log=log)
        runs_a_task(tmp_path, log, "after")
        assert cluster.poll() is None, "the cluster's main process exited"
        until(lambda: ClusterHeartbeat.objects.get().restarts == 1, "the restart counted", within=30, log=log)
        took = signal_stop(cluster, group=True, within=STOP_BOUND)
        assert took is not None, f"still running {STOP_BOUND} s after SIGTERM\n{log.read_text()[-3000:]}"
    finally:
        kill_process(cluster)
        connection.close()


def test_a_cluster_whose_main_process_is_killed_leaves_no_process_behind(tmp_path):
    """Its supervisor then starts a new cluster; a sentinel or worker of the old one left
    running would take tasks unsupervised (django-q2's would, until the group was killed)."""
    log = tmp_path / "qcluster.log"
    cluster = start_qcluster(log, Q_WORKERS="2", LOG_LEVEL="INFO")
    try:
        started(cluster, log)
        os.kill(cluster.pid, signal.SIGKILL)
        cluster.wait(10)
        until(lambda: not group_alive(cluster), "every process of the cluster to die with it", within=30, log=log)
    finally:
        kill_process(cluster)
        connection.close()
