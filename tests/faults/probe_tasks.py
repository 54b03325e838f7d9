"""django-q2 tasks for the worker-kill tests (tests/faults/test_kill_cluster_process.py):
each leaves a file behind, so the test sees from outside that a worker of the cluster ran it."""

from __future__ import annotations

import os
import time
from pathlib import Path


def mark(path: str) -> None:
    Path(path).write_text(str(os.getpid()))


def slow_mark(path: str, seconds: float) -> None:
    """Say which worker runs it (`path`.started holds its pid), then take `seconds`."""
    Path(path + ".started").write_text(str(os.getpid()))
    time.sleep(seconds)
    Path(path).write_text(str(os.getpid()))
