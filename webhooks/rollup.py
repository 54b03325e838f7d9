"""Webhook deliveries rolled up by hour and kind (first delivery or redelivery, payload
matched or not): what the overview's webhook figures and deliveries chart count. The
machinery (watermark, settling, repair, read side) is `idemdash.core.rollup`'s; the
`receipts.rollup` schedule, `manage.py rollup` and the seeder's rewind find this roll-up
through ROLLUPS."""

from __future__ import annotations

from idemdash.core.attempts import rollup_by_duration
from idemdash.core.rollup import HourlyRollup
from webhooks.models import DeliveryHourly, ProcessingDurationHourly, WebhookAttempt, WebhookDelivery

DELIVERIES = HourlyRollup(
    name="webhooks.deliveries",
    log=WebhookDelivery,
    time_field="received_at",
    groups=("duplicate", "payload_matches"),
    table=DeliveryHourly,
    retention_setting="WEBHOOKS_ROLLUP_RETENTION_DAYS",
)

# Handler runs by the hour they finished in and how long they took: the overview's
# processing-duration history (p50, p99).
PROCESSING = rollup_by_duration(
    "webhooks.processing_durations", WebhookAttempt, "finished_at", "duration_ms", ProcessingDurationHourly,
    "WEBHOOKS_ROLLUP_RETENTION_DAYS",
)

ROLLUPS = [DELIVERIES, PROCESSING]
