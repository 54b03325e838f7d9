"""django-q2 entry points, referred to by dotted path from schedules.py."""

from dataclasses import asdict
from typing import Any

from django.utils import timezone

from idemdash.core import failures
from idemdash.dashboard import alerts, health


def evaluate_alerts() -> dict[str, Any]:
    # The health checks' transitions are recorded on the same minute, so a tile's "since"
    # is right to the minute even while nobody has the overview open; and failure groups
    # quiet for failures.QUIET resolve within that minute.
    health.observe()
    resolved = failures.resolve_quiet(timezone.now())
    return {**asdict(alerts.evaluate()), "failure_groups_resolved": resolved}
