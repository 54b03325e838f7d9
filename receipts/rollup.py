"""The receipts' roll-up: the attempt log counted by hour and outcome (the machinery is
`idemdash.core.rollup`'s)."""

from __future__ import annotations

from idemdash.core.attempts import rollup_by_outcome
from receipts.models import Attempt, AttemptHourly

# Moved to idemdash.core.rollup; kept for one release.
from idemdash.core.rollup import (  # noqa: F401
    HOUR,
    HourlyRollup,
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

ATTEMPTS = rollup_by_outcome("receipts.attempts", Attempt, AttemptHourly, "RECEIPTS_ROLLUP_RETENTION_DAYS")

ROLLUPS = [ATTEMPTS]
