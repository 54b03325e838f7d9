"""Webhook deliveries rolled up by hour and kind (first delivery or redelivery, payload
matched or not): what the overview's webhook figures and deliveries chart count. The
machinery (watermark, settling, repair, read side) is `idemdash.core.rollup`'s; the
`receipts.rollup` schedule, `manage.py rollup` and the seeder's rewind find this roll-up
through ROLLUPS."""

from __future__ import annotations

from idemdash.core.rollup import HourlyRollup
from webhooks.models import DeliveryHourly, WebhookDelivery

DELIVERIES = HourlyRollup(
    name="webhooks.deliveries",
    log=WebhookDelivery,
    time_field="received_at",
    groups=("duplicate", "payload_matches"),
    table=DeliveryHourly,
    retention_setting="WEBHOOKS_ROLLUP_RETENTION_DAYS",
)

ROLLUPS = [DELIVERIES]
