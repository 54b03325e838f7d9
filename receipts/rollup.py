"""The receipts' roll-ups: the attempt log counted by hour and outcome, the claims'
durations as an hourly histogram, and the observer's notes by route and kind (the machinery
is `idemdash.core.rollup`'s)."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Case, Exists, OuterRef, Q, Value, When

from idemdash.core.attempts import CLAIM_BOUNDS_MS, rollup_by_duration, rollup_by_outcome
from idemdash.core.rollup import HourlyRollup
from receipts.conf import setting
from receipts.models import Attempt, AttemptHourly, ClaimDurationHourly, ObservedHourly, ObservedRequest

ATTEMPTS = rollup_by_outcome("receipts.attempts", Attempt, AttemptHourly, "RECEIPTS_ROLLUP_RETENTION_DAYS")

# Claims by hour and `claim_ms`, for the claim-latency history: read through an index, so it
# costs the claim nothing.
CLAIMS = rollup_by_duration(
    "receipts.claim_durations", Attempt, "created_at", "claim_ms", ClaimDurationHourly,
    "RECEIPTS_ROLLUP_RETENTION_DAYS", bounds=CLAIM_BOUNDS_MS,
)



def observed_kind() -> Case:
    """A note's kind: "skipped", "duplicate" (its fingerprint on its route within the window), or "first"."""
    window = timedelta(seconds=setting("RECEIPTS_OBSERVE_WINDOW_SECONDS"))
    earlier = ObservedRequest.objects.filter(
        Q(at__lt=OuterRef("at")) | Q(at=OuterRef("at"), id__lt=OuterRef("id")),
        route=OuterRef("route"), fingerprint=OuterRef("fingerprint"), at__gte=OuterRef("at") - window,
    )
    return Case(When(~Q(skipped=""), then=Value("skipped")), When(Exists(earlier), then=Value("duplicate")),
                default=Value("first"))


# The notes are kept a day; their counts as long as the other roll-ups.
OBSERVED = HourlyRollup(
    "receipts.observed", ObservedRequest, "at", ("method", "route", "kind"), ObservedHourly,
    "RECEIPTS_ROLLUP_RETENTION_DAYS", computed=(("kind", observed_kind),),
)

ROLLUPS = [ATTEMPTS, CLAIMS, OBSERVED]
