"""django-q2 entry points, referred to by dotted path from schedules.py."""

from typing import Any

from idemdash.dashboard import alerts


def evaluate_alerts() -> dict[str, Any]:
    return alerts.evaluate().as_dict()
