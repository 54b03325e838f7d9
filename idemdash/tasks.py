"""Moved to idemdash.dashboard.tasks; kept for one release, as tasks queued or scheduled
before the move name this path."""

from idemdash.dashboard.tasks import evaluate_alerts  # noqa: F401
