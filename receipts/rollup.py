"""The receipts' roll-up: the attempt log counted by hour and outcome (the machinery is
`idemdash.core.rollup`'s)."""

from __future__ import annotations

from idemdash.core.rollup import HourlyRollup
from receipts.models import Attempt, AttemptHourly

# Moved to idemdash.core.rollup; kept for one release.
from idemdash.core.rollup import (  # noqa: F401
    HOUR,
    MAX_HOURS_PER_RUN,
    MAX_RUNS_PER_TASK,
    REPAIR,
    RETENTION_DAYS,
    SETTLE,
    RollupResult,
    catch_up,
    floor_hour,
    floor_minute,
    installed_rollups,
    rewind,
)

ATTEMPTS = HourlyRollup(
    name="receipts.attempts",
    log=Attempt,
    time_field="created_at",
    groups=("outcome",),
    table=AttemptHourly,
    retention_setting="RECEIPTS_ROLLUP_RETENTION_DAYS",
)

ROLLUPS = [ATTEMPTS]
