"""When to try again, decided once for every caller: Retry-After (RFC 9110 10.2.3) read as
seconds or an HTTP date, and the one backoff. The clients' retries, the in-process API's and
the server's (the outbox's sends, webhook events) all use these."""

from __future__ import annotations

import random
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


def backoff(
    attempt: int, base: float, cap: float, retry_after: float | None = None, retry_after_max: float | None = None
) -> float:
    """Seconds to wait after failed try number `attempt` (1 = the first): `base` doubling,
    at most `cap`, at a random point in the upper half of the step ("equal jitter"), so that
    units that failed together (a dependency was down) do not come back together while the
    delay still grows. Never shorter than what the other side asked for (`retry_after`,
    itself capped at `retry_after_max`), and up to a quarter longer at random, so that a
    crowd told the same Retry-After does not come back in the same instant either."""
    step = min(cap, base * 2 ** max(0, attempt - 1))
    delay = random.uniform(step / 2, step)
    if retry_after is not None:
        asked = float(retry_after) if retry_after_max is None else min(float(retry_after), retry_after_max)
        delay = max(delay, asked * random.uniform(1.0, 1.25))
    return delay
