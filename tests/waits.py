"""Waiting for something to happen: the one poll the suite makes, a condition with a deadline.

A test waits for an outcome (a row, a thread parked on a lock, a server up), never for a time
that it hopes is long enough; the deadline is generous and only ends a test that hangs, naming
what never happened. tests/conftest.py lets fast tests poll here and nowhere else."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def until(condition: Callable[[], T], what: str, within: float = 30, every: float = 0.02, log: Path | None = None) -> T:
    """condition()'s first truthy value, looked at every `every` seconds; AssertionError naming
    `what` (and the end of `log`, a server's or worker's output) if `within` seconds pass first."""
    deadline = time.monotonic() + within
    while not (found := condition()):
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
            raise AssertionError(f"{what}: not within {within:g} s" + (f"\n{tail}" if tail else ""))
        time.sleep(every)
    return found
