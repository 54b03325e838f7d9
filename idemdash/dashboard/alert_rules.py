"""What an alert rule says, apart from the database: its metrics and the units they are read
in, its window, its target. The rule's model (models.py) and the evaluation (alerts.py)
both import it; it imports neither, which keeps them from importing each other."""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.core.validators import URLValidator, validate_email
from django.db import models

from idemdash.dashboard import queries
from idemdash.dashboard.templatetags.idemdash_tags import duration, percent
from receipts.outbox.actions import get_action


class Metric(models.TextChoices):
    DUPLICATE_RATE = "duplicate_rate", "Duplicate rate"
    CONCURRENT_DUPLICATES = "concurrent_duplicates", "Concurrent duplicates (409 or waited)"
    MISMATCH_CONFLICTS = "mismatch_conflicts", "422 mismatches"
    FAILING_KEYS = "failing_keys", "Keys failing repeatedly"
    STUCK_ROWS = "stuck_rows", "Stuck rows (receipts, webhook events, outbox messages)"
    DEAD_WEBHOOK_EVENTS = "dead_webhook_events", "Dead webhook events"
    DEAD_OUTBOX_MESSAGES = "dead_outbox_messages", "Dead outbox messages"
    OUTBOX_BACKLOG_AGE = "outbox_backlog_age", "Outbox backlog age (seconds)"
    REJECTED_DELIVERIES = "rejected_deliveries", "Rejected webhook deliveries (signature and format)"
    UNPROTECTED_DUPLICATES = "unprotected_duplicates", "Would-be duplicates on unprotected routes"
    FRESH_KEY_RETRIES = "fresh_key_retries", "Fresh-key retries that ran again"
    FAILING_GROUPS = "failing_groups", "Failure groups with a dead event or message"


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "HTTP POST (Slack-compatible JSON)"


# The attempt logs are kept 35 days (RECEIPTS_ATTEMPT_RETENTION_DAYS); a longer window
# would quietly count less than it says.
MAX_WINDOW_MINUTES = 30 * 24 * 60

# The dashboard's windows, by their minutes, so a rule reads like the overview.
WINDOW_NAMES = {int(w.span.total_seconds() // 60): name for name, w in queries.WINDOWS.items()}

# Figures that describe the present, not a span of time: their rule's window is ignored.
INSTANT_METRICS = frozenset({Metric.STUCK_ROWS, Metric.OUTBOX_BACKLOG_AGE})

# Rates: measured as a fraction (as the stats document has them), but read, typed and
# stored in percent, as the tile shows them: a rule's threshold of 20 means 20%.
PERCENT_METRICS = frozenset({Metric.DUPLICATE_RATE})


# --- windows ------------------------------------------------------------------------------


def window_label(minutes: int) -> str:
    if minutes in WINDOW_NAMES:
        return WINDOW_NAMES[minutes]
    if minutes % 60 == 0:
        return f"{minutes // 60}h"
    return f"{minutes}m"


_WINDOW_RE = re.compile(r"^\s*(\d{1,6})\s*([mhd]?)\s*$", re.I)


def parse_window_minutes(text: str) -> int:
    """`1h`, `24h`, `7d`, `30d`, `15m` or a bare number of minutes."""
    match = _WINDOW_RE.match(text or "")
    if not match:
        raise ValidationError("Give a window such as 15m, 1h, 24h, 7d, 30d, or a number of minutes.")
    number, unit = int(match[1]), match[2].lower() or "m"
    minutes = number * {"m": 1, "h": 60, "d": 1440}[unit]
    if not 1 <= minutes <= MAX_WINDOW_MINUTES:
        raise ValidationError(f"The window must be between 1 minute and 30 days; got {window_label(minutes)}.")
    return minutes


# --- targets ------------------------------------------------------------------------------


def check_target(channel: str, target: str) -> None:
    """Refuse a target now that the outbox would refuse at the first firing."""
    if channel == Channel.EMAIL:
        validate_email(target)
        return
    URLValidator(schemes=["http", "https"], message="Give an http or https URL.")(target)
    try:
        get_action("http.post").validate({"url": target, "json": {}})
    except ValueError as exc:  # e.g. a host outside OUTBOX_HTTP_ALLOWED_HOSTS
        raise ValidationError(str(exc)) from None


# --- figures in their unit ----------------------------------------------------------------


def format_value(metric: str, value: float) -> str:
    """A measured figure as its tile shows it: "36.74%", "3 min", "4"."""
    if metric in PERCENT_METRICS:
        return percent(value)
    if metric == Metric.OUTBOX_BACKLOG_AGE:
        return duration(value) if value >= 1 else "0 s"
    return f"{value:g}"


def format_threshold(metric: str, threshold: float) -> str:
    """A rule's threshold in its unit: "20%", "300 s", "0"."""
    if metric in PERCENT_METRICS:
        return f"{threshold:g}%"
    if metric == Metric.OUTBOX_BACKLOG_AGE:
        return f"{threshold:g} s"
    return f"{threshold:g}"
