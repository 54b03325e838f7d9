"""The process helpers of tests/qcluster.py: a process group is signalled only while it is
still ours. A killpg after its leader was reaped can reach whatever process has the number
since (each PostgreSQL backend leads a group of its own): in CI that terminated a test's
database connection in the middle of a later test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.qcluster import group_alive, group_members, kill_process, signal_group

pytestmark = pytest.mark.slow

# A leader that starts a child in its own group and then exits at once (or sleeps), and the child.
SPAWN = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
        "time.sleep(float(sys.argv[1]))"


def spawn(leader_seconds: float) -> subprocess.Popen:
    leader = subprocess.Popen([sys.executable, "-c", SPAWN, str(leader_seconds)], start_new_session=True)
    deadline = time.monotonic() + 10
    while not group_members(leader):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.02)
    return leader


def test_the_members_of_a_group_are_found_and_killed_even_after_its_leader_was_reaped():
    leader = spawn(0)
    leader.wait(10)  # reaped: its pid would be free, were its child not still in its group
    assert len(group_members(leader)) == 1
    assert group_alive(leader)
    kill_process(leader)
    deadline = time.monotonic() + 10
    while group_members(leader):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not group_alive(leader)  # the child dead (a zombie, if nothing reaps orphans here)


def test_a_reaped_leader_with_no_member_left_is_not_signalled(monkeypatch):
    leader = subprocess.Popen([sys.executable, "-c", ""], start_new_session=True)
    leader.wait(10)
    sent = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    signal_group(leader, signal.SIGTERM)
    kill_process(leader)
    assert sent == []  # the number may be another process's by now


def test_a_running_leader_is_signalled_with_its_group():
    leader = spawn(60)
    (child,) = group_members(leader)
    signal_group(leader, signal.SIGTERM)
    assert leader.wait(10) == -signal.SIGTERM
    deadline = time.monotonic() + 10
    while group_members(leader):
        assert time.monotonic() < deadline, f"child {child} outlived the SIGTERM"
        time.sleep(0.02)
