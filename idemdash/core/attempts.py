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
