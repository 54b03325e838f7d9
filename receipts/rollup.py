"""The receipts' roll-up: the attempt log counted by hour and outcome (the machinery is
`idemdash.core.rollup`'s)."""

from __future__ import annotations

from idemdash.core.attempts import rollup_by_outcome
from receipts.models import Attempt, AttemptHourly

ATTEMPTS = rollup_by_outcome("receipts.attempts", Attempt, AttemptHourly, "RECEIPTS_ROLLUP_RETENTION_DAYS")

ROLLUPS = [ATTEMPTS]
