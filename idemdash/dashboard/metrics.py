"""`/metrics`: idemdash's figures for Prometheus, through prometheus_client.

A custom collector on a registry of its own (not the process-wide default one: a scrape
reports the database's figures, which every web process serves alike, never this process's
internals). It reads what the dashboard reads, never a scan of the logs at scrape time:

- counters (`_total`): every claim, delivery, message and send attempt ever counted, from the
  hourly roll-ups, the few minutes of log past their watermark, and what retention carried
  away from them (`idemdash.core.rollup.HourlyRollup.totals`), so they only go up;
- gauges: the state right now (stuck rows, the outbox's backlog and its age, failed receipts
  and dead events and messages), each an indexed count.

Names and units follow Prometheus' conventions: the `idemdash_` prefix, `_total` for counters,
`_seconds` for durations and ages, labels only for small closed sets (outcome, kind): never a
key, a scope or a user. docs/operations.md ("Prometheus and Grafana") lists them.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from idemdash.dashboard import queries
from receipts import rollup as receipt_rollups
from receipts.models import Attempt
from receipts.outbox import rollup as outbox_rollups
from receipts.outbox.models import OutboxMessage
from webhooks import rollup as webhook_rollups
from webhooks.models import WebhookEvent

# Every metric: name -> help. Its type is in the name (`_total`: counter; else gauge); the
# rules and dashboard under docs/monitoring/ are checked against these names
# (tests/dashboard/test_metrics.py).
HELP: dict[str, str] = {
    "idemdash_receipt_claims_total": "Claim requests (HTTP decorator, JSON API, in process) by outcome of the attempt log: "
    "claimed, replayed, in_progress (409), waited, mismatch (422), retried_after_failure, lease_takeover, outcome_unknown.",
    "idemdash_receipt_settles_total": "Settled attempts by outcome of the attempt log: completed, failed, released, "
    "stale_token and the rest that are not claims.",
    "idemdash_webhook_deliveries_total": "Verified webhook deliveries stored, by kind: first (a new event) or "
    "redelivery (payload_matches says whether the redelivery's JSON equalled the stored payload).",
    "idemdash_outbox_messages_enqueued_total": "Outbox messages enqueued.",
    "idemdash_outbox_attempts_total": "Outbox send attempts by outcome: sent, retry, dead and the rest.",
    "idemdash_receipts_stuck": "Receipts processing past their lease right now.",
    "idemdash_receipts_failed": "Receipts failed and not released right now (what a bulk release would touch).",
    "idemdash_webhook_events_stuck": "Webhook events processing past their lease right now.",
    "idemdash_webhook_events_dead": "Webhook events dead (out of attempts) right now.",
    "idemdash_outbox_messages_pending": "Outbox messages waiting to be sent (pending or retry) right now.",
    "idemdash_outbox_oldest_pending_age_seconds": "Age of the oldest waiting outbox message; 0 when nothing waits.",
    "idemdash_outbox_messages_stuck": "Outbox messages in flight past their lease right now.",
    "idemdash_outbox_messages_dead": "Outbox messages dead (permanent error or out of attempts) right now.",
}

CLAIM_OUTCOMES = frozenset(Attempt.CLAIM_OUTCOMES)


# The labels of each labelled metric, in order; a metric not here has none.
LABELS: dict[str, tuple[str, ...]] = {
    "idemdash_receipt_claims_total": ("outcome",),
    "idemdash_receipt_settles_total": ("outcome",),
    "idemdash_webhook_deliveries_total": ("kind", "payload_matches"),
    "idemdash_outbox_attempts_total": ("outcome",),
}


def figures(now: datetime) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every metric's samples now, (labels, value) by name: what a Prometheus scrape and an
    OpenTelemetry collection (idemdash/dashboard/otel_metrics.py) both report."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in HELP}
    for (outcome,), n in sorted(receipt_rollups.ATTEMPTS.totals(now).items()):
        name = "idemdash_receipt_claims_total" if outcome in CLAIM_OUTCOMES else "idemdash_receipt_settles_total"
        found[name].append(({"outcome": outcome}, n))
    for (duplicate, matches), n in sorted(webhook_rollups.DELIVERIES.totals(now).items()):
        kind = "redelivery" if duplicate == "True" else "first"
        found["idemdash_webhook_deliveries_total"].append(({"kind": kind, "payload_matches": matches.lower()}, n))
    found["idemdash_outbox_messages_enqueued_total"].append(({}, sum(outbox_rollups.ENQUEUED.totals(now).values())))
    for (outcome,), n in sorted(outbox_rollups.ATTEMPTS.totals(now).items()):
        found["idemdash_outbox_attempts_total"].append(({"outcome": outcome}, n))

    backlog = queries.outbox_backlog()
    oldest = backlog["oldest"]
    gauges = {
        "idemdash_receipts_stuck": queries.stuck_receipts(now).count(),
        "idemdash_receipts_failed": queries.failed_receipts().count(),
        "idemdash_webhook_events_stuck": queries.stuck_events(now).count(),
        "idemdash_webhook_events_dead": WebhookEvent.objects.filter(status=WebhookEvent.Status.DEAD).count(),
        "idemdash_outbox_messages_pending": backlog["pending"],
        "idemdash_outbox_oldest_pending_age_seconds": max(0.0, (now - oldest).total_seconds()) if oldest else 0.0,
        "idemdash_outbox_messages_stuck": queries.stuck_messages(now).count(),
        "idemdash_outbox_messages_dead": OutboxMessage.objects.filter(status=OutboxMessage.Status.DEAD).count(),
    }
    for name, value in gauges.items():
        found[name].append(({}, value))
    return found


class IdemdashCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        for name, samples in figures(timezone.now()).items():
            labels = LABELS.get(name, ())
            if name.endswith("_total"):
                family: Metric = CounterMetricFamily(name.removesuffix("_total"), HELP[name], labels=labels)
            else:
                family = GaugeMetricFamily(name, HELP[name], labels=labels)
            for sample_labels, value in samples:
                family.add_metric([sample_labels[label] for label in labels], value)
            yield family


# The text format every Prometheus server reads (prometheus_client's own default moved on to 1.0.0,
# which older servers do not name); generate_latest writes it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition() -> bytes:
    """The text a scrape gets (Prometheus' text format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IdemdashCollector())
    return generate_latest(registry)

