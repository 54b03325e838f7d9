"""`/metrics`: idemdash's figures for Prometheus, through prometheus_client.

A custom collector on a registry of its own (not the process-wide default one: a scrape
reports the database's figures, which every web process serves alike, never this process's
internals). It reads what the dashboard reads, never a scan of the logs at scrape time:
counters and histograms from the hourly roll-ups, carried past retention so they never go
down, and gauges of the state right now, each an indexed count. Names and units follow
Prometheus' conventions, with labels only for small closed sets: never a key, a scope, a
user or a caller's text. docs/dashboard.md ("Prometheus: GET /metrics") lists them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from idemdash.core.attempts import DurationRollup
from idemdash.dashboard import queries
from receipts import rollup as receipt_rollups
from receipts.models import Attempt
from receipts.outbox import rollup as outbox_rollups
from receipts.outbox.models import OutboxMessage
from webhooks import rollup as webhook_rollups
from webhooks.models import RejectedDelivery, RejectionCount, WebhookEvent

# Every metric: name -> help. Its type is in the name (`_total`: counter; in HISTOGRAMS: a
# histogram; else gauge); the
# rules and dashboard under docs/monitoring/ are checked against these names
# (tests/dashboard/test_metrics.py).
HELP: dict[str, str] = {
    "idemdash_receipt_claims_total": "Claim requests (HTTP decorator, JSON API, in process) by outcome of the attempt log: "
    "claimed, replayed, in_progress (409), waited, mismatch (422), retried_after_failure, lease_takeover, outcome_unknown, fresh_key_retry (409).",
    "idemdash_receipt_settles_total": "Settled attempts by outcome of the attempt log: completed, failed, released, "
    "stale_token and the rest that are not claims.",
    "idemdash_webhook_deliveries_total": "Verified webhook deliveries stored, by kind: first (a new event) or "
    "redelivery (payload_matches says whether the redelivery's JSON equalled the stored payload).",
    "idemdash_webhook_deliveries_rejected_total": "Webhook deliveries refused with 400 (failed verification), by "
    "reason: the RejectedDelivery cause (missing_header, no_matching_signature, stale_timestamp, ...).",
    "idemdash_outbox_messages_enqueued_total": "Outbox messages enqueued.",
    "idemdash_outbox_attempts_total": "Outbox send attempts by outcome: sent, retry, dead and the rest.",
    "idemdash_receipt_claim_duration_seconds": "How long claims took to decide, from the store being asked to the "
    "decision logged (less any wait for a running first attempt), every claim outcome alike.",
    "idemdash_webhook_processing_duration_seconds": "How long webhook handler runs took (every run: processed or failed).",
    "idemdash_outbox_send_duration_seconds": "How long outbox send attempts took (every attempt that sent a request).",
    "idemdash_receipts_stuck": "Receipts processing past their lease right now.",
    "idemdash_receipts_failed": "Receipts failed and not released right now (what a bulk release would touch).",
    "idemdash_webhook_events_stuck": "Webhook events processing past their lease right now.",
    "idemdash_webhook_events_dead": "Webhook events dead (out of attempts) right now.",
    "idemdash_outbox_messages_pending": "Outbox messages waiting to be sent (pending or retry) right now.",
    "idemdash_outbox_oldest_pending_age_seconds": "Age of the oldest waiting outbox message; 0 when nothing waits.",
    "idemdash_outbox_messages_stuck": "Outbox messages in flight past their lease right now.",
    "idemdash_outbox_messages_dead": "Outbox messages dead (permanent error or out of attempts) right now.",
    "idemdash_unprotected_requests_total": "Write requests to routes nothing protects, as the observer noted them, "
    "by kind: first, duplicate (a would-be duplicate: the same caller's same request within the observer's "
    "window, which ran again) or skipped (not fingerprinted).",
}

CLAIM_OUTCOMES = frozenset(Attempt.CLAIM_OUTCOMES)

# Every histogram: name -> the duration roll-up it is read from.
HISTOGRAMS: dict[str, DurationRollup] = {
    "idemdash_receipt_claim_duration_seconds": receipt_rollups.CLAIMS,
    "idemdash_webhook_processing_duration_seconds": webhook_rollups.PROCESSING,
    "idemdash_outbox_send_duration_seconds": outbox_rollups.SENDS,
}


def histogram(name: str, rolled: DurationRollup, now: datetime) -> HistogramMetricFamily:
    """A duration roll-up as a Prometheus histogram in seconds: the roll-up's buckets made
    cumulative (a roll-up bucket holds durations below its bound: `le` is that bound), +Inf
    the count, and the sum. From the hourly duration roll-ups
    (`idemdash.core.attempts.DurationRollup.histogram`: buckets and sum carried past retention
    as the counters are), so no bucket, sum or count goes down."""
    counts, total_ms = rolled.histogram(now)
    buckets, running = [], 0
    for i, bound in enumerate(rolled.bounds):
        running += counts.get(i, 0)
        # The shortest text of the bound: le="0.005", never le="0.005000000000000001".
        buckets.append((repr(bound / 1000), running))
    buckets.append(("+Inf", running + counts.get(len(rolled.bounds), 0)))
    return HistogramMetricFamily(name, HELP[name], buckets=buckets, sum_value=total_ms / 1000)


def figures(now: datetime) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every counter's and gauge's samples now, (labels, value) by name: what a Prometheus
    scrape and an OpenTelemetry collection (idemdash/dashboard/otel_metrics.py) both report.
    The histograms (HISTOGRAMS) are read apart, by `histogram`.

    Counters (`_total`) count every claim, delivery, message and send attempt ever: the
    hourly roll-ups, the few minutes of log past their watermark, and what retention carried
    away from them (`idemdash.core.rollup.HourlyRollup.totals`), so they only go up. Gauges
    are the state right now (stuck rows, the outbox's backlog and its age, failed receipts and
    dead events and messages), each an indexed count."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {name: [] for name in HELP if name not in HISTOGRAMS}
    for (outcome,), n in sorted(receipt_rollups.ATTEMPTS.totals(now).items()):
        name = "idemdash_receipt_claims_total" if outcome in CLAIM_OUTCOMES else "idemdash_receipt_settles_total"
        found[name].append(({"outcome": outcome}, n))
    for (duplicate, matches), n in sorted(webhook_rollups.DELIVERIES.totals(now).items()):
        kind = "redelivery" if duplicate == "True" else "first"
        found["idemdash_webhook_deliveries_total"].append(({"kind": kind, "payload_matches": matches.lower()}, n))
    # Only the causes the code knows: a label set that cannot grow from what callers send.
    causes = RejectedDelivery.Cause.values
    counted = dict(RejectionCount.objects.filter(cause__in=causes).values_list("cause", "count"))
    for cause, n in sorted({cause: counted.get(cause, 0) for cause in causes}.items()):
        found["idemdash_webhook_deliveries_rejected_total"].append(({"reason": cause}, n))
    found["idemdash_outbox_messages_enqueued_total"].append(({}, sum(outbox_rollups.ENQUEUED.totals(now).values())))
    for (outcome,), n in sorted(outbox_rollups.ATTEMPTS.totals(now).items()):
        found["idemdash_outbox_attempts_total"].append(({"outcome": outcome}, n))
    kinds: dict[str, int] = dict.fromkeys(("first", "duplicate", "skipped"), 0)
    for (_method, _route, kind), n in receipt_rollups.OBSERVED.totals(now).items():
        kinds[kind] += n  # by kind alone: a route's label would grow with the host's URLconf
    for kind, n in kinds.items():
        found["idemdash_unprotected_requests_total"].append(({"kind": kind}, n))

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
        now = timezone.now()
        for name, samples in figures(now).items():
            labels = tuple(samples[0][0]) if samples else ()  # every sample of a metric has the same labels
            if name.endswith("_total"):
                family: Metric = CounterMetricFamily(name.removesuffix("_total"), HELP[name], labels=labels)
            else:
                family = GaugeMetricFamily(name, HELP[name], labels=labels)
            for sample_labels, value in samples:
                family.add_metric([sample_labels[label] for label in labels], value)
            yield family
        # Histograms are not (labels, value) samples: each is its buckets, sum and count.
        for name, rolled in HISTOGRAMS.items():
            yield histogram(name, rolled, now)


# The text format every Prometheus server reads (prometheus_client's own default moved on to 1.0.0,
# which older servers do not name); generate_latest writes it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition() -> bytes:
    """The text a scrape gets (Prometheus' text format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IdemdashCollector())
    return generate_latest(registry)

