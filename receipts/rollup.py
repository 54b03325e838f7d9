"""The receipts' roll-ups: the attempt log counted by hour and outcome, and the claims'
durations as an hourly histogram (the machinery is `idemdash.core.rollup`'s)."""

from __future__ import annotations

from idemdash.core.attempts import CLAIM_BOUNDS_MS, rollup_by_duration, rollup_by_outcome
from receipts.models import Attempt, AttemptHourly, ClaimDurationHourly

ATTEMPTS = rollup_by_outcome("receipts.attempts", Attempt, AttemptHourly, "RECEIPTS_ROLLUP_RETENTION_DAYS")

# Claims by the hour they were decided in and how long the decision took (`claim_ms`, on the
# line the claim logs anyway): the overview's claim-latency history (p50, p99). Read through
# the attempt log's (created_at, outcome, claim_ms) index, so it costs the claim nothing.
CLAIMS = rollup_by_duration(
    "receipts.claim_durations", Attempt, "created_at", "claim_ms", ClaimDurationHourly,
    "RECEIPTS_ROLLUP_RETENTION_DAYS", bounds=CLAIM_BOUNDS_MS,
)

ROLLUPS = [ATTEMPTS, CLAIMS]
