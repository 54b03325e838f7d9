"""The worker's settings, flat `WORKER_*` names, each optional (the convention of every app's
conf module)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # How often each cluster hands its workers the tick (idemdash/worker/liveness.py); 0: never.
    "WORKER_TICK_SECONDS": 5,
    # A cluster whose workers took no work for this long has stopped taking work: longer than
    # a task may keep every worker busy (django-q2's timeout, 60 s, and its 3 s of grace), so
    # that a cluster busy with long tasks is not taken for a wedged one.
    "WORKER_STALE_SECONDS": 90,
}


def setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
