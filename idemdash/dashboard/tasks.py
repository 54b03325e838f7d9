"""django-q2 entry points, referred to by dotted path from schedules.py."""

from dataclasses import asdict
from typing import Any

from idemdash.dashboard import alerts, health


def evaluate_alerts() -> dict[str, Any]:
    # The health checks' transitions are recorded on the same minute, so a tile's "since"
    # is right to the minute even while nobody has the overview open.
    health.observe()
    return asdict(alerts.evaluate())
