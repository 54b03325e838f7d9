"""Retry-After (RFC 9110 10.2.3), read once for every caller: the clients' retries and the
outbox's http.post (receipts/outbox/actions.py)."""

from __future__ import annotations

from datetime import datetime
from datetime import timezone as dt_timezone
from email.utils import parsedate_to_datetime


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header: delta-seconds, or an HTTP date (seconds from `now`,
    never below 0); None when absent or neither."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt_timezone.utc)
    return max(0.0, (when - (now or datetime.now(dt_timezone.utc))).total_seconds())
