"""`python -m idemdash.devtools.bench.inprocess`, run as a user runs it, on PostgreSQL (it needs
the bench app's table, which the suite's settings do not install). It refuses to report when a
path did not do what it is named for (a claim not fresh, a replay not replayed, a delivery not
stored), so a zero exit says each path ran as named. Timings are not asserted."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.conf import settings

from idemdash.devtools.bench.cputime import RUN_ONCE_PATHS
from idemdash.devtools.bench.inprocess import BREAKDOWN_PATHS, PATHS

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def _inprocess(url: str, *options: str) -> list[str]:
    """The tool's output lines, run on the database at `url`, beside the suite's."""
    env = {**os.environ, "DATABASE_URL": url}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "-m", "idemdash.devtools.bench.inprocess", "--requests", "6", "--rounds", "2", "--label", "t",
         *options],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout.strip().splitlines()


def test_every_hot_path_gets_its_cpu_and_its_ratio_to_the_bare_insert(database_of_its_own):
    line, db, both, run_once = _inprocess(database_of_its_own("idemdash_inprocess_test"))[-4:]
    assert line.startswith("t CPU per request, median of 2 rounds: ")
    figures = dict(re.findall(r"(\w+) (\d+) µs", line))
    assert set(figures) == set(PATHS) and all(int(us) > 0 for us in figures.values())
    assert len(re.findall(r"\(\d+\.\d\dx bare\)", line)) == len(PATHS) - 1
    # The database server runs on this machine (the suite's PostgreSQL is local): its CPU, read
    # from /proc/<pid>/schedstat in nanoseconds (not in 10 ms clock ticks, which six requests
    # may not reach), every path's above zero and its ratio to the bare insert's; and the sum.
    assert db.startswith("t database CPU per request, median of 2 rounds: ")
    server = dict(re.findall(r"(\w+) (\d+) µs", db))
    assert set(server) == set(PATHS) and all(int(us) > 0 for us in server.values()), db
    assert len(re.findall(r"\(\d+\.\d\dx bare\)", db)) == len(PATHS) - 1
    assert both.startswith("t CPU per request with the database's, median of 2 rounds: ")
    summed = dict(re.findall(r"(\w+) (\d+) µs", both))
    assert set(summed) == set(PATHS) and all(int(summed[p]) >= int(figures[p]) - 1 for p in PATHS)
    # The in-process API beside the ORM insert it wraps.
    assert run_once.startswith("t CPU per call in process, median of 2 rounds: ")
    figures = dict(re.findall(r"(\w+) (\d+) µs", run_once))
    assert set(figures) == set(RUN_ONCE_PATHS) and all(int(us) > 0 for us in figures.values())
    assert len(re.findall(r"\(\d+\.\d\dx insert\)", run_once)) == len(RUN_ONCE_PATHS) - 1


def test_the_breakdown_parts_each_protected_requests_cpu_and_leaves_the_bare_insert_its_own(database_of_its_own):
    lines = _inprocess(database_of_its_own("idemdash_inprocess_test"), "--breakdown")[-len(BREAKDOWN_PATHS):]
    parts = {}
    for path, line in zip(BREAKDOWN_PATHS, lines, strict=True):
        assert line.startswith(f"t {path}, CPU per request in this process, median of 2 rounds: ")
        items = (item.rsplit(" ", 2) for item in line.split(": ", 1)[1].split(", "))  # "<part> <n> µs"
        parts[path] = {part: int(us) for part, us, _ in items}
    # Each path called the parts it is named for, and no other: the wrappers were in place
    # where the decorator and the view look them up.
    assert set(parts["bare"]) == {"total", "view's insert", "rest"}
    assert set(parts["claim"]) == {"total", "view's insert", "claim", "completion", "COMMIT", "rest"}
    # No part runs inside another (which would count its CPU twice and leave the rest below zero).
    for figures in parts.values():
        assert figures["total"] > 0 and all(us >= 0 for us in figures.values())
