"""Attempt logs: one row per thing that happened to a unit of work, copied so that the log
outlives the unit when retention deletes it.

Each kind's log declares its own outcomes (and the one among them that records a stale
settle, `STALE_OUTCOME`); what they have alike is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import Case, Value, When

from idemdash.core.rollup import HourlyCount, HourlyRollup


class AttemptLog(models.Model):
    """The fields every attempt log has alike: the unit's key and when it happened."""

    # The outcome that records a settle refused for a stale fencing token; set by each log.
    STALE_OUTCOME: str = ""

    key = models.CharField(max_length=255)
    created_at = models.DateTimeField()

    class Meta:
        abstract = True


def record_stale(log: type[AttemptLog], **fields: Any) -> AttemptLog:
    """Record a settle that changed nothing because its fencing token no longer owned the
    unit. Written in the settle's own transaction; the caller raises its StaleToken after
    that transaction commits, so the record is kept."""
    return log.objects.create(outcome=log.STALE_OUTCOME, **fields)


def rollup_by_outcome(name: str, log: type[AttemptLog], table: type[HourlyCount], retention_setting: str) -> HourlyRollup:
    """An attempt log's hourly roll-up, as the dashboard charts it: rows counted by the hour
    they happened in and their outcome (`table` has `hour`, `outcome` and `count`)."""
    return HourlyRollup(
        name=name, log=log, time_field="created_at", groups=("outcome",), table=table, retention_setting=retention_setting
    )


# --- will another attempt help? ----------------------------------------------------------

# The 4xx statuses another attempt can change: the server timed out waiting (408), found a
# conflict (409, e.g. the same key still running), was asked too early (425) or asked us to
# slow down (429). Every other 4xx says the request itself is refused: sent again unchanged,
# it is refused again. 5xx are the server's own trouble and may pass.
RETRYABLE_4XX = frozenset({408, 409, 425, 429})


def lasting_status(code: int | None) -> bool:
    """Whether a failure with this HTTP status would come back on every retry."""
    return code is not None and 400 <= code < 500 and code not in RETRYABLE_4XX


def lasting_status_q(field: str) -> models.Q:
    """`lasting_status` as a filter on a status-code column, for counting such rows in SQL.
    tests/core/test_attempts.py holds the two to the same answer for every code."""
    return models.Q(**{f"{field}__gte": 400, f"{field}__lt": 500}) & ~models.Q(**{f"{field}__in": sorted(RETRYABLE_4XX)})


# Upper bounds (exclusive, in milliseconds) of a duration histogram's buckets: bucket i
# holds durations below bounds[i] (and at or above the bound before it); the last bucket,
# len(bounds), holds the rest; NO_DURATION, rows without one. "Below", not "at most": the
# handler and send durations are whole milliseconds rounded down (a stored 5 is 5.0 to
# 5.999 ms), so "below 5" is exactly Prometheus' `le="0.005"`. DURATION_BOUNDS_MS serves
# handler runs and sends (milliseconds to a minute); CLAIM_BOUNDS_MS serves claims, most of
# which take under a millisecond on PostgreSQL.
DURATION_BOUNDS_MS: tuple[float, ...] = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
CLAIM_BOUNDS_MS: tuple[float, ...] = (0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 10000)
NO_DURATION = -1


def duration_bucket(field: str, bounds: tuple[float, ...] = DURATION_BOUNDS_MS) -> Case:
    """The histogram bucket of `field` (milliseconds) as SQL, the same on every database."""
    return Case(
        When(**{f"{field}__isnull": True}, then=Value(NO_DURATION)),
        *[When(**{f"{field}__lt": bound}, then=Value(i)) for i, bound in enumerate(bounds)],
        default=Value(len(bounds)),
        output_field=models.SmallIntegerField(),
    )


class DurationHourly(HourlyCount):
    """A row of a duration histogram rolled up by hour (`rollup_by_duration`): how many rows
    of the log fell in one UTC hour and one bucket (the roll-up's `bounds`), and the sum of
    their durations (for Prometheus' `_sum`: an average over any range)."""

    bucket = models.SmallIntegerField()
    sum_ms = models.FloatField(default=0)

    class Meta:
        abstract = True


@dataclass(frozen=True)
class DurationRollup(HourlyRollup):
    """An hourly histogram of a log's durations (`rollup_by_duration`), with its buckets'
    upper bounds, which its readers need: the overview's quantiles, /metrics' `le` labels."""

    bounds: tuple[float, ...] = DURATION_BOUNDS_MS

    def histogram(self, now: datetime) -> tuple[dict[int, int], float]:
        """Every duration ever logged up to `now`, as ({bucket: count}, sum in ms), the
        NO_DURATION rows left out: the roll-up, the log after its watermark and what
        retention carried away (`HourlyRollup.sums`), so no bucket and no sum ever goes down."""
        counts: dict[int, int] = {}
        total_ms = 0.0
        for (bucket,), (n, summed) in self.sums(now).items():
            if int(bucket) != NO_DURATION:
                counts[int(bucket)] = n
                total_ms += summed
        return counts, total_ms


def rollup_by_duration(
    name: str, log: type[models.Model], time_field: str, field: str, table: type[HourlyCount], retention_setting: str,
    bounds: tuple[float, ...] = DURATION_BOUNDS_MS,
) -> DurationRollup:
    """A log's durations rolled up as an hourly histogram: rows counted by hour and the
    bucket of `field` (`table`, a DurationHourly, has `hour`, `bucket`, `count` and `sum_ms`),
    from which `percentile` reads p50 and p99 per hour without the log."""
    return DurationRollup(
        name=name, log=log, time_field=time_field, groups=("bucket",), table=table,
        retention_setting=retention_setting, computed=(("bucket", duration_bucket(field, bounds)),),
        summed=(("sum_ms", field),), bounds=bounds,
    )


def percentile(histogram: dict[int, int], q: float, bounds: tuple[float, ...] = DURATION_BOUNDS_MS) -> float | None:
    """The q-quantile (0 < q <= 1) of a histogram {bucket: count} as its bucket's upper
    bound in milliseconds (the last bucket: its lower bound, "at least"); None when empty.
    Accurate to the bucket, which is what an hourly history can promise."""
    counted = sorted((b, n) for b, n in histogram.items() if b != NO_DURATION and n > 0)
    total = sum(n for _, n in counted)
    if not total:
        return None
    running = 0
    for bucket, n in counted:
        running += n
        if running >= q * total:
            return bounds[min(bucket, len(bounds) - 1)]
    return bounds[-1]
