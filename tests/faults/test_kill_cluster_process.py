"""SIGKILL one process of a real `manage.py qcluster` (two workers, the database broker), at
each point where django-q2 can leave the cluster's shared queues locked or half-written, and
check that the cluster takes work again within seconds and still stops on SIGTERM.

The roles and points: each of the two workers while idle (one of them is inside the task
queue's get(), holding its lock, the other waits for that lock), a worker in the middle of a
task, the monitor, the pusher, and the sentinel; and the main process, after which no process
of the cluster may be left running. Unmodified django-q2 (1.11) wedges for good
when the worker inside get() dies: its replacement waits forever for the lock the dead
process held, the scheduler keeps running, and a SIGTERM never finishes.

Bounded: every wait has a deadline, and the cluster's process group is killed in `finally`.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
from django.db import connection
from django_q.tasks import async_task

from idemdash.worker.models import ClusterHeartbeat
from tests.faults.test_kill_qcluster import wait_for
from tests.qcluster import group_alive, kill_process, signal_stop, start_qcluster

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

# From the kill to a new task done: the sentinel notices within its one-second guard cycle,
# the cluster's processes start again, the pusher polls every half second.
BACK_WITHIN = 20
STOP_BOUND = 15


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

    return wait_for(ready, 60, "the cluster to start", log)


def runs_a_task(tmp_path: Path, log: Path, name: str) -> None:
    done = tmp_path / name
    async_task("tests.faults.probe_tasks.mark", str(done))
    wait_for(done.exists, BACK_WITHIN, f"a task run after the kill ({name})", log)


@pytest.mark.parametrize("role", ["worker 0 idle", "worker 1 idle", "worker mid-task", "monitor", "pusher", "sentinel"])
def test_a_cluster_with_a_process_killed_takes_work_again_within_seconds_and_still_stops(tmp_path, role):
    log = tmp_path / "qcluster.log"
    cluster = start_qcluster(log, Q_WORKERS="2", LOG_LEVEL="INFO")
    try:
        sentinel, found = started(cluster, log)
        runs_a_task(tmp_path, log, "before")  # both workers have been through get() by now
        time.sleep(0.5)
        if role == "worker mid-task":
            slow = tmp_path / "slow"
            async_task("tests.faults.probe_tasks.slow_mark", str(slow), 30)
            victim = int(wait_for(lambda: Path(str(slow) + ".started").exists() and Path(str(slow) + ".started").read_text(), 30, "the slow task", log))
        elif role == "sentinel":
            victim = sentinel
        elif role.startswith("worker"):
            victim = sorted(found["worker"])[int(role.split()[1])]
        else:
            (victim,) = found[role]
        os.kill(victim, signal.SIGKILL)

        # Not one process replaced on the old queues, as django-q2 does, but all started afresh;
        # then the new processes take work.
        said = "its sentinel exited with code -9" if role == "sentinel" else "died (exit code -9)"
        wait_for(lambda: said in log.read_text(), BACK_WITHIN, "the cluster to see the death", log)
        runs_a_task(tmp_path, log, "after")
        assert cluster.poll() is None, "the cluster's main process exited"
        wait_for(lambda: ClusterHeartbeat.objects.get().restarts == 1, 5, "the restart counted", log)
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
        wait_for(lambda: not group_alive(cluster), 10, "every process of the cluster to die with it", log)
    finally:
        kill_process(cluster)
        connection.close()
