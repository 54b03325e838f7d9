"""The outbox rolled up by hour: messages enqueued, and attempts by outcome. What the
overview's outbox figures and the flow chart count. The machinery (watermark, settling,
repair, read side) is `idemdash.core.rollup`'s; the `receipts.rollup` schedule, `manage.py rollup`
and the seeder's rewind find these roll-ups through ROLLUPS."""

from __future__ import annotations

from idemdash.core.attempts import rollup_by_outcome
from idemdash.core.rollup import HourlyRollup
from receipts.outbox.models import OutboxAttempt, OutboxAttemptHourly, OutboxMessage, OutboxMessageHourly

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

ROLLUPS = [ENQUEUED, ATTEMPTS]
