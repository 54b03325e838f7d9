"""A django-q2 task for tests/faults/test_stop_qcluster.py that outlives its timeout: it
blocks SIGALRM, by which the worker would end it itself, so only the guard's SIGTERM can."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def stuck(marker: str) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    # Written whole, then renamed into place: the test reads it as soon as it exists, and a
    # file still being written read as empty under load.
    partial = Path(marker + ".partial")
    partial.write_text(str(os.getpid()))
    partial.rename(marker)
    time.sleep(600)
