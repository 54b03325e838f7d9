"""Attempt logs: one row per thing that happened to a unit of work, copied so that the log
outlives the unit when retention deletes it.

Each kind's log declares its own outcomes (and the one among them that records a stale
settle, `STALE_OUTCOME`); what they have alike is here.
"""

from __future__ import annotations

from typing import Any

from django.db import models

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
