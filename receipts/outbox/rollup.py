"""The outbox rolled up by hour: messages enqueued, and attempts by outcome. What the
overview's outbox figures and the flow chart count. The machinery (watermark, settling,
repair, read side) is `idemdash.core.rollup`'s; the `receipts.rollup` schedule, `manage.py rollup`
and the seeder's rewind find these roll-ups through ROLLUPS."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Min, QuerySet, Value
from django.db.models.functions import Greatest

from idemdash.core.attempts import rollup_by_duration, rollup_by_outcome
from idemdash.core.rollup import HourlyRollup, floor_hour
from receipts.outbox.conf import setting
from receipts.outbox.models import (
    BacklogAgeHourly,
    OutboxAttempt,
    OutboxAttemptHourly,
    OutboxMessage,
    OutboxMessageHourly,
    SendDurationHourly,
)

# No group: the chart and the figure count every message alike, whatever its action.
ENQUEUED = HourlyRollup(
    name="outbox.messages",
    log=OutboxMessage,
    time_field="created_at",
    groups=(),
    table=OutboxMessageHourly,
    retention_setting="OUTBOX_MESSAGE_ROLLUP_RETENTION_DAYS",
)

ATTEMPTS = rollup_by_outcome("outbox.attempts", OutboxAttempt, OutboxAttemptHourly, "OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS")

# Sends by the hour they were tried in and how long they took: the overview's
# send-duration history (p50, p99).
SENDS = rollup_by_duration(
    "outbox.send_durations", OutboxAttempt, "created_at", "duration_ms", SendDurationHourly,
    "OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS",
)

ROLLUPS = [ENQUEUED, ATTEMPTS, SENDS]


def sample_backlog_age(now: datetime) -> int:
    """Keep the backlog's age now (the oldest waiting message, pending or retry, as the
    overview's tile has it) as its hour's worst if it is worse; returns it. Run by every
    roll-up run (every minute): one MIN on the waiting messages' index and one conditional
    UPDATE, or the hour's first insert, so two runs at once keep the larger age."""
    waiting = (OutboxMessage.Status.PENDING, OutboxMessage.Status.RETRY)
    oldest = OutboxMessage.objects.filter(status__in=waiting).aggregate(t=Min("created_at"))["t"]
    age = max(0, int((now - oldest).total_seconds())) if oldest else 0
    hour = floor_hour(now)
    rows = BacklogAgeHourly.objects.filter(hour=hour)
    worse = {"max_age_seconds": Greatest("max_age_seconds", Value(age)), "samples": F("samples") + 1}
    if not rows.update(**worse):
        try:
            with transaction.atomic():
                BacklogAgeHourly.objects.create(hour=hour, max_age_seconds=age, samples=1)
        except IntegrityError:  # another run inserted the hour first
            rows.update(**worse)
    return age


def expired_backlog_ages(now: datetime) -> QuerySet:
    days = setting("OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS")
    return BacklogAgeHourly.objects.filter(hour__lt=now - timedelta(days=days))


# Gauges the roll-up run samples (idemdash.core.rollup.catch_up): what a log cannot tell later.
SAMPLERS = [sample_backlog_age]
