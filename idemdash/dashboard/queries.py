"""Read-side aggregates for the overview, /api/v1/stats and /metrics.

One function per block of the stats document (`receipt_stats`; `webhook_stats` and
`outbox_stats` join it the same way), each taking the window and the instant it ends, so
that the JSON, the tiles and the metrics are computed once from the same numbers.
Each figure family is one grouped query, never a query per figure or per bucket."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.apps import apps
from django.db import OperationalError, connections, transaction
from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet
from django.db.models.functions import TruncDay, TruncHour, TruncMinute
from django.urls import reverse
from django.utils import timezone

from idemdash.core.leases import stuck
from idemdash.core import rollup as core_rollup
from idemdash.core.attempts import NO_DURATION, percentile
from receipts import coverage, fresh_keys, references, rollup
from idemdash.core.failures import FailureGroup
from idemdash.core.models import AuditEntry, BulkRun
from receipts.models import Attempt, Receipt
from receipts.outbox import pauses
from receipts.outbox import rollup as outbox_rollup
from receipts.outbox.models import BacklogAgeHourly, OutboxAttempt, OutboxMessage
from webhooks import endpoints
from webhooks import rollup as webhooks_rollup
from webhooks.models import RejectedDelivery, WebhookEndpoint, WebhookEvent
from webhooks.rollup import DELIVERIES

Outcome = Attempt.Outcome


@dataclass(frozen=True)
class Window:
    name: str
    span: timedelta
    bucket: timedelta  # chart resolution
    trunc: type  # the coarsest SQL truncation that still divides `bucket`


WINDOWS: dict[str, Window] = {
    w.name: w
    for w in (
        Window("1h", timedelta(hours=1), timedelta(minutes=5), TruncMinute),
        Window("24h", timedelta(hours=24), timedelta(hours=1), TruncHour),
        Window("7d", timedelta(days=7), timedelta(hours=6), TruncHour),
        Window("30d", timedelta(days=30), timedelta(days=1), TruncDay),
    )
}
DEFAULT_WINDOW = "24h"
# The overview opens on the last hour (5-minute bars) until the user picks another window,
# which their session keeps: a fresh demo's first minutes fill several bars there, where
# 24 hourly bars showed one spike.
OVERVIEW_DEFAULT_WINDOW = "1h"


class BadWindow(ValueError):
    pass


def parse_window(value: str | None, default: str = DEFAULT_WINDOW) -> Window:
    if value in (None, ""):
        return WINDOWS[default]
    try:
        return WINDOWS[value]
    except KeyError:
        raise BadWindow(f"window must be one of {', '.join(WINDOWS)}; got {value!r}") from None


# block -> field -> definition, for every block of `overview_stats`: the table in
# docs/dashboard.md ("What each figure means") comes from here, so the definition lives in one place.
FIELD_DOCS: dict[str, dict[str, str]] = {
    "receipts": {
        "requests": "Claim requests in the window (HTTP decorator and API alike): attempts with "
        "outcome claimed, replayed, in_progress, mismatch, retried_after_failure, lease_takeover or waited.",
        "claimed": "Claim requests that were allowed to run the operation: claimed + "
        "retried_after_failure + lease_takeover.",
        "replayed": "Claim requests answered from a stored result (outcome replayed).",
        "concurrent_duplicates": "Claim requests that arrived while the key's first attempt was still "
        "running: answered 409 (outcome in_progress), or waited for it and got its result (outcome waited).",
        "waited": "Of the concurrent duplicates, those that waited for the running first attempt (Prefer: "
        "wait, wait_seconds, the Python client's default) and got its result (outcome waited).",
        "mismatch_conflicts": "Claim requests answered 422 because the key was reused with a different request.",
        "duplicate_rate": "(replayed + concurrent_duplicates + mismatch_conflicts) / requests; 0 when "
        "there were no requests. A fraction between 0 and 1, rounded to 4 decimals.",
        "failed": "Receipts now in status failed, and not released since, whose last change falls "
        "in the window: the keys a bulk release of that window would touch. A released receipt "
        "(given back, waiting for the caller's next attempt) is not counted.",
        "stuck": "Receipts processing past their lease right now (independent of the window).",
    },
    "webhooks": {
        "deliveries": "Webhook deliveries that passed verification and were stored in the window, "
        "first deliveries and provider retries alike (WebhookDelivery rows received in the window).",
        "events": "Unique events first received in the window (first deliveries: a redelivery of an "
        "event first seen earlier is not counted).",
        "duplicates": "Redeliveries of an event already stored: deliveries - events.",
        "duplicate_rate": "duplicates / deliveries; 0 when there were no deliveries. A fraction "
        "between 0 and 1, rounded to 4 decimals.",
        "payload_mismatches": "Redeliveries in the window whose JSON differed from the stored payload "
        "(the first payload is kept).",
        "rejected": "Deliveries refused with 400 in the window (failed verification; RejectedDelivery rows).",
        "dead": "Events now dead (out of attempts) that died in the window (finished_at in the "
        "window): what a bulk reprocess of that window would touch.",
        "stuck": "Events processing past their lease right now (independent of the window); the "
        "sweeper returns them to retry within a minute.",
    },
    "outbox": {
        "enqueued": "Outbox messages created in the window, including those retention has purged "
        "since (sent messages after 7 days): whole hours are counted by the hourly roll-up, which "
        "outlives the messages; only the window's first, partial hour is read from the messages.",
        "sent": "Messages sent in the window: attempts with outcome sent (from the attempt log and "
        "its hourly roll-up, which outlive purged messages).",
        "pending": "The backlog right now: messages waiting to be sent (status pending or retry), "
        "independent of the window.",
        "dead": "Messages now dead (permanent error or out of attempts) whose last change falls in "
        "the window: what sending that window's dead messages again would touch.",
        "oldest_pending_age_seconds": "Seconds since the oldest waiting message (pending or retry) "
        "was enqueued, right now, as a whole number; 0 when nothing waits.",
        "stuck": "Messages in flight past their lease right now (independent of the window); the "
        "next drain claims them again.",
    },
    "unprotected": {
        "requests": "Write requests (POST, PUT, PATCH, DELETE) to routes nothing protects, as the observer "
        "noted them in the window (receipts/observe.py; docs/coverage.md), from their hourly roll-up and "
        "the notes after it.",
        "duplicates": "Would-be duplicates: of those requests, the ones whose caller had sent the same request "
        "(method, path, canonical body) to the same route within RECEIPTS_OBSERVE_WINDOW_SECONDS (600) before. "
        "Each ran its side effect again, where a receipt would have replayed it.",
        "duplicate_rate": "duplicates / requests; 0 when there were no requests. A fraction between 0 and 1, "
        "rounded to 4 decimals.",
    },
    "fresh_keys": {
        "retries": "Fresh-key retries in the window: claims of the same request (caller, operation, method, "
        "path, canonical body) that another key had made within RECEIPTS_FRESH_KEY_WINDOW_SECONDS (600) before "
        "(receipts/fresh_keys.py; docs/http-contract.md): ran_again + refused.",
        "ran_again": "Of those, the ones whose operation allows them (\"fresh_key\": \"allow\", the default): "
        "each ran its side effect again under its new key. Read from the receipts still kept (their TTL).",
        "refused": "Of those, the ones answered 409 fresh-key-retry (\"fresh_key\": \"refuse\"): nothing ran.",
    },
}


def window_start(window: Window, now: datetime) -> datetime:
    return now - window.span


def receipt_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    start = window_start(window, now)
    counts: Counter[str] = Counter()
    for _, outcome, n in rollup.ATTEMPTS.counts(start, now):
        counts[outcome] += n
    claims = claim_figures(counts)
    requests = claims["requests"]
    return {
        "requests": requests,
        "claimed": sum(counts[o] for o in (Outcome.CLAIMED, Outcome.RETRIED_AFTER_FAILURE, Outcome.LEASE_TAKEOVER)),
        "replayed": counts[Outcome.REPLAYED],
        "concurrent_duplicates": claims["concurrent"],
        "waited": counts[Outcome.WAITED],
        "mismatch_conflicts": counts[Outcome.MISMATCH],
        "duplicate_rate": round(claims["duplicates"] / requests, 4) if requests else 0.0,
        "failed": failed_receipts(start, now).count(),
        "stuck": stuck_receipts(now).count(),
    }


def claim_figures(counts: Any) -> dict[str, int]:
    """What attempt counts by outcome add up to: the claim requests, the concurrent duplicates
    among them, and every duplicate (replayed, concurrent or 422: not run)."""
    concurrent = sum(counts[o] for o in Attempt.CONCURRENT_OUTCOMES)
    return {"requests": sum(counts[o] for o in Attempt.CLAIM_OUTCOMES), "concurrent": concurrent,
            "duplicates": counts[Outcome.REPLAYED] + concurrent + counts[Outcome.MISMATCH]}


def failed_receipts(start: datetime | None = None, end: datetime | None = None):
    """Failed and not released (served by the partial index receipt_failed_updated)."""
    qs = Receipt.objects.filter(status=Receipt.Status.FAILED, released_at=None)
    if start is not None:
        qs = qs.filter(updated_at__gt=start)
    if end is not None:
        qs = qs.filter(updated_at__lte=end)
    return qs


def stuck_receipts(now: datetime | None = None):
    """Processing past the lease, oldest lease first (served by the partial index)."""
    return stuck(Receipt, Receipt.Status.PROCESSING, now or timezone.now())


def webhook_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    start = window_start(window, now)
    # Each figure of the events table is its own query on its own partial index: one
    # aggregate with a FILTER per figure read the whole table.
    deliveries = events = mismatches = 0
    for _, duplicate, payload_matches, n in DELIVERIES.counts(start, now):
        deliveries += n
        events += 0 if duplicate else n
        mismatches += n if duplicate and not payload_matches else 0
    dead = WebhookEvent.objects.filter(status=WebhookEvent.Status.DEAD, finished_at__gt=start, finished_at__lte=now)
    return {
        "deliveries": deliveries,
        "events": events,
        "duplicates": deliveries - events,
        "duplicate_rate": round((deliveries - events) / deliveries, 4) if deliveries else 0.0,
        "payload_mismatches": mismatches,
        "rejected": RejectedDelivery.objects.filter(received_at__gt=start, received_at__lte=now).count(),
        "dead": dead.count(),
        "stuck": stuck_events(now).count(),
    }


def stuck_events(now: datetime | None = None):
    return stuck(WebhookEvent, WebhookEvent.Status.PROCESSING, now or timezone.now())


def stuck_messages(now: datetime | None = None):
    return stuck(OutboxMessage, OutboxMessage.Status.IN_FLIGHT, now or timezone.now())


def oldest_age(rows: Any, field: str, now: datetime) -> float:
    """Seconds since the earliest `field` among `rows` (the oldest waiting message, the
    lease expired longest ago); 0 when there are none."""
    oldest = rows.aggregate(t=Min(field))["t"]
    return max(0.0, (now - oldest).total_seconds()) if oldest else 0.0


def outbox_backlog() -> dict[str, Any]:
    """The messages waiting to be sent (pending or retry) right now: how many, and when the
    oldest was enqueued (None: nothing waits)."""
    Status = OutboxMessage.Status
    return OutboxMessage.objects.filter(status__in=[Status.PENDING, Status.RETRY]).aggregate(
        pending=Count("*"), oldest=Min("created_at")
    )


def unprotected_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    """Write requests to routes nothing protects, as the observer noted them
    (receipts/observe.py), and the would-be duplicates among them, over the window."""
    now = now or timezone.now()
    noted = coverage.unprotected_counts(window_start(window, now), now).values()
    requests, duplicates = sum(n["requests"] for n in noted), sum(n["duplicates"] for n in noted)
    return {"requests": requests, "duplicates": duplicates,
            "duplicate_rate": round(duplicates / requests, 4) if requests else 0.0}


def fresh_key_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    """The same requests under new keys in the window (receipts/fresh_keys.py): those that ran
    again and those refused."""
    found = fresh_keys.retries(window_start(window, now or timezone.now()), now)
    refused = sum(r["refused"] for r in found)
    return {"retries": len(found), "ran_again": len(found) - refused, "refused": refused}


def outbox_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    start = window_start(window, now)
    # Enqueued and sent from their hourly roll-ups and the last minutes of the tables, as the
    # delivery figures; the rest one query per figure, each on its own index.
    backlog = outbox_backlog()
    oldest = backlog["oldest"]
    dead = OutboxMessage.objects.filter(status=OutboxMessage.Status.DEAD, updated_at__gt=start, updated_at__lte=now)
    return {
        "enqueued": sum(n for _, n in outbox_rollup.ENQUEUED.counts(start, now)),
        "sent": sum(n for _, _, n in outbox_rollup.ATTEMPTS.counts(start, now, outcome=OutboxAttempt.Outcome.SENT)),
        "pending": backlog["pending"],
        "dead": dead.count(),
        "oldest_pending_age_seconds": max(0, int((now - oldest).total_seconds())) if oldest else 0,
        "stuck": stuck_messages(now).count(),
    }


def worker_clusters() -> list[Any]:
    """The worker clusters seen in the last day, each with when it last took work and its
    state (idemdash/worker/models.py:ClusterHeartbeat), newest first; none without the
    worker app. By model name: the dashboard does not import the worker."""
    if not apps.is_installed("idemdash.worker"):
        return []
    return list(apps.get_model("idemdash_worker", "ClusterHeartbeat").objects.recent()[:20])


# The stats document's blocks, by name: add a block by adding its function here.
BLOCKS: dict[str, Callable[[Window, datetime], dict[str, Any]]] = {
    "receipts": receipt_stats,
    "webhooks": webhook_stats,
    "outbox": outbox_stats,
    "unprotected": unprotected_stats,
    "fresh_keys": fresh_key_stats,
}


def overview_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    """The whole stats document: the window's name and every block of BLOCKS."""
    now = now or timezone.now()
    return {"window": window.name, **{name: stats(window, now) for name, stats in BLOCKS.items()}}


# --- time series for the charts ------------------------------------------------------------

# The claim requests, then the operator's releases.
SERIES_OUTCOMES = (*Attempt.CLAIM_OUTCOMES, Outcome.RELEASED)


def _floor(moment: datetime, bucket: timedelta) -> datetime:
    step = int(bucket.total_seconds())
    seconds = int(moment.timestamp()) // step * step
    return datetime.fromtimestamp(seconds, tz=dt_timezone.utc)


def _bucket_counts(
    rolled: core_rollup.HourlyRollup, window: Window, start: datetime, now: datetime, **where: Any
) -> list[tuple]:
    """(t, *groups, n) of a rolled-up log in (start, now], to fold into the window's buckets:
    per hour from the roll-up and the log (`HourlyRollup.counts`), or, for buckets shorter
    than an hour (at most an hour of the log), per minute from the log."""
    if window.bucket % core_rollup.HOUR:
        return rolled.log_counts(start, now, trunc=window.trunc, **where)
    return rolled.counts(start, now, by_hour=True, **where)


def receipt_series(window: Window, now: datetime | None = None) -> list[dict[str, Any]]:
    """Attempt outcomes per time bucket, every bucket present (zeros included), oldest first
    (the bucket rows of `_empty_buckets`)."""
    now = now or timezone.now()
    buckets = _empty_buckets(window, now, [o.value for o in SERIES_OUTCOMES])
    start = window_start(window, now)
    _fold(buckets, window, _bucket_counts(rollup.ATTEMPTS, window, start, now, outcome__in=SERIES_OUTCOMES),
          lambda outcome: (outcome,))
    for b in buckets.values():
        b.update(claim_figures(b))
    return list(buckets.values())


def _empty_buckets(window: Window, now: datetime, names: list[str]) -> dict[datetime, dict[str, Any]]:
    """Every bucket of the chart, zeros. Each knows its range [start, end) and whether it
    is still `partial`: the last one, which ends after now and is still filling. The first
    bucket usually starts before the window does, and counts only from the window's start,
    which it keeps as `cut` (the charts mark it), so that the buckets add up to the tiles."""
    start = window_start(window, now)
    buckets: dict[datetime, dict[str, Any]] = {}
    moment = _floor(start, window.bucket)
    while moment <= now:
        end = moment + window.bucket
        buckets[moment] = {"start": moment, "end": end, "partial": end > now,
                           "cut": start if moment < start else None, **{n: 0 for n in names}}
        moment = end
    return buckets


def _fold(buckets: dict[datetime, dict[str, Any]], window: Window, rows: Any, names_of: Any) -> None:
    """Add grouped (t, *groups, n) rows into the window's buckets; `names_of(*groups)` names
    the series a group counts towards."""
    for t, *group, n in rows:
        bucket = buckets.get(_floor(t, window.bucket))
        if bucket is not None:
            for name in names_of(*group):
                bucket[name] += n


def _grouped(qs: Any, window: Window, field: str, group: str) -> Any:
    return (
        qs.annotate(t=window.trunc(field, tzinfo=dt_timezone.utc))
        .values_list("t", group)
        .annotate(n=Count("*"))  # not COUNT(id): the time indexes do not hold the id
        .order_by()
    )


def unprotected_series(window: Window, now: datetime | None = None) -> list[dict[str, Any]]:
    """Write requests to unprotected routes (`requests`) and the would-be duplicates among
    them (`duplicates`) per bucket, every bucket present, oldest first: the observer's roll-up
    (receipts.rollup.OBSERVED) folded into the window's buckets, so they add up to `unprotected_stats`."""
    now = now or timezone.now()
    buckets = _empty_buckets(window, now, ["requests", "duplicates"])
    rows = _bucket_counts(rollup.OBSERVED, window, window_start(window, now), now)
    _fold(buckets, window, rows,
          lambda _method, _route, kind: ("requests", "duplicates") if kind == "duplicate" else ("requests",))
    return list(buckets.values())


# Operator releases of stuck webhook events and outbox messages, as the audit log names them.
STUCK_RELEASE_ACTIONS = {"webhook_event.release": "events_released", "outbox_message.release": "messages_released"}


def flow_series(window: Window, now: datetime | None = None) -> list[dict[str, Any]]:
    """Webhook and outbox activity per bucket, every bucket present, oldest first: stored
    `deliveries` and the first among them (`events`); outbox messages `enqueued`, attempts
    that `sent` one or left it dead (`died`), and `stale` ones (whose drainer had lost its
    lease by the time it finished); stuck rows an operator released (`events_released`,
    `messages_released`, one grouped query on the audit log). The rest from the roll-ups."""
    now = now or timezone.now()
    start = window_start(window, now)
    names = ["deliveries", "events", "enqueued", "sent", "died", "stale", *STUCK_RELEASE_ACTIONS.values()]
    buckets = _empty_buckets(window, now, names)

    _fold(buckets, window, _bucket_counts(DELIVERIES, window, start, now),
          lambda duplicate, _: ("deliveries",) if duplicate else ("deliveries", "events"))
    _fold(buckets, window, _bucket_counts(outbox_rollup.ENQUEUED, window, start, now), lambda: ("enqueued",))
    outcomes = {OutboxAttempt.Outcome.SENT: "sent", OutboxAttempt.Outcome.DEAD: "died", OutboxAttempt.Outcome.STALE: "stale"}
    attempts = _bucket_counts(outbox_rollup.ATTEMPTS, window, start, now, outcome__in=list(outcomes))
    _fold(buckets, window, attempts, lambda outcome: (outcomes[outcome],))
    releases = _grouped(
        AuditEntry.objects.filter(
            action__in=list(STUCK_RELEASE_ACTIONS),
            created_at__gt=start, created_at__lte=now,
        ),
        window, "created_at", "action",
    )
    _fold(buckets, window, releases, lambda action: (STUCK_RELEASE_ACTIONS[action],))
    return list(buckets.values())


# --- history from the hourly roll-ups ---------------------------------------------------------

# The duration histograms charted, by the name their p50 and p99 take in a history bucket.
DURATION_ROLLUPS = {"claim": rollup.CLAIMS, "processing": webhooks_rollup.PROCESSING, "send": outbox_rollup.SENDS}


def history_series(window: Window, now: datetime | None = None) -> list[dict[str, Any]]:
    """Latency and backlog age per bucket, every bucket present, oldest first: for each of
    DURATION_ROLLUPS its `<name>_p50` / `<name>_p99` (milliseconds, the upper bound of the
    histogram bucket the quantile falls in; None without runs) and `<name>_runs`, and
    `backlog_age` (the worst age of the oldest waiting outbox message in the bucket, as the
    minute's roll-up run sampled it; None where nothing was sampled). From the hourly
    roll-ups, so the buckets are hours at the finest (the 1h window gets the two hours it
    touches); coarser windows merge the hours' histograms."""
    now = now or timezone.now()
    hourly = Window(window.name, window.span, max(window.bucket, core_rollup.HOUR), TruncHour)
    start = window_start(window, now)
    buckets = _empty_buckets(hourly, now, [])
    histograms = {t: {name: {} for name in DURATION_ROLLUPS} for t in buckets}
    for name, rolled in DURATION_ROLLUPS.items():
        for t, bucket, n in rolled.counts(start, now, by_hour=True):
            histogram = histograms.get(_floor(t, hourly.bucket), {}).get(name)
            if histogram is not None:
                histogram[bucket] = histogram.get(bucket, 0) + n
    ages: dict[datetime, int] = {}
    samples = BacklogAgeHourly.objects.filter(hour__gte=core_rollup.floor_hour(start), hour__lte=now)
    for hour, age in samples.values_list("hour", "max_age_seconds"):
        t = _floor(hour, hourly.bucket)
        ages[t] = max(age, ages.get(t, 0))
    for t, row in buckets.items():
        for name, histogram in histograms[t].items():
            bounds = DURATION_ROLLUPS[name].bounds
            row[f"{name}_p50"] = percentile(histogram, 0.5, bounds)
            row[f"{name}_p99"] = percentile(histogram, 0.99, bounds)
            row[f"{name}_runs"] = sum(n for b, n in histogram.items() if b != NO_DURATION)
        row["backlog_age"] = ages.get(t)
    return list(buckets.values())


def latest(qs: Any, *order: str, limit: int) -> tuple[list, int]:
    """The latest `limit` rows of `qs` by `order` (newest first), returned oldest first, and
    how many rows there are; counted only when the page is full. A retry storm can leave
    thousands of rows on one unit: a detail page and a trace show the latest ones."""
    rows = list(qs.order_by(*order)[:limit])[::-1]
    return rows, qs.count() if len(rows) == limit else len(rows)


# --- list totals -------------------------------------------------------------------------------

# Counting stops at TOTAL_CAP rows, and on PostgreSQL after TOTAL_BUDGET_MS (a filter such
# as "had a 409" probes the attempt log for every row it counts): past either, the list
# shows the planner's estimate instead, so that a filter matching millions of rows costs
# what one matching a few thousand costs.
TOTAL_CAP = 10_000
TOTAL_BUDGET_MS = 50


@dataclass(frozen=True)
class Total:
    """How many rows a list's filter matches: `count`, exact; or, not exact, at least
    `count` (0 when the count ran out of time) and about `estimate` (PostgreSQL's planner;
    None on SQLite or when the planner guessed no more than was counted)."""

    count: int
    exact: bool = True
    estimate: int | None = None


def list_total(qs: Any, cap: int | None = None) -> Total:
    """The total of every dashboard list: one COUNT over at most cap + 1 matching rows, then,
    past the cap or the time budget on PostgreSQL, the row estimate of the query's plan
    (EXPLAIN, which does not run it)."""
    cap = cap or TOTAL_CAP
    qs = qs.order_by()
    counted = _bounded_count(qs, cap)
    if counted is not None and counted <= cap:
        return Total(counted)
    known = cap if counted is not None else 0
    estimate = _planner_rows(qs)
    # "More than 10,000 (about 10,000)" would say nothing: an estimate is shown when it
    # says clearly more than was counted.
    return Total(known, exact=False, estimate=estimate if estimate and estimate > known * 3 // 2 else None)


@contextmanager
def statement_budget(db: Any, ms: int, **local: int) -> Iterator[None]:
    """On PostgreSQL, each statement in the block is cancelled past `ms` milliseconds: the
    block raises OperationalError (QueryCanceled) and its transaction (a savepoint inside
    the caller's) is rolled back. `local` sets other settings for the block alike; each is
    set back after it, as a caller's transaction goes on. Elsewhere the block runs unbounded."""
    if db.vendor != "postgresql":
        yield
        return
    names = {"statement_timeout": ms, **local}
    with transaction.atomic(using=db.alias):
        with db.cursor() as cursor:
            for name, value in names.items():
                cursor.execute(f"SET LOCAL {name} = {int(value)}")
        yield
        with db.cursor() as cursor:
            for name in names:
                cursor.execute(f"SET LOCAL {name} = DEFAULT")


def _bounded_count(qs: Any, cap: int) -> int | None:
    """COUNT(*) of at most cap + 1 rows; None if PostgreSQL could not finish it in the budget."""
    rows = qs.values("pk")[: cap + 1]
    try:
        with statement_budget(connections[qs.db], TOTAL_BUDGET_MS):
            return rows.count()
    except OperationalError:  # QueryCanceled: the budget ran out
        return None


def _planner_rows(qs: Any) -> int | None:
    if connections[qs.db].vendor != "postgresql":
        return None
    sql, params = qs.values("pk").query.sql_with_params()
    with connections[qs.db].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])


# What a receipt's callers got besides its own run: the list's replay / concurrent / 422
# columns (a 409 and a wait for the running first attempt are both concurrent duplicates).
DUPLICATE_OUTCOMES = {
    Outcome.REPLAYED: "replays",
    **{o: "concurrent" for o in Attempt.CONCURRENT_OUTCOMES},
    Outcome.MISMATCH: "mismatches",
}


def duplicate_counts(receipt_ids: list[int]) -> dict[int, dict[str, int]]:
    """Replays, concurrent duplicates and 422s per receipt, for one page of receipts: one
    grouped query on the attempt log's (receipt, created_at) index, not one per row."""
    counts = {pk: {name: 0 for name in DUPLICATE_OUTCOMES.values()} for pk in receipt_ids}
    rows = (
        Attempt.objects.filter(receipt_id__in=receipt_ids, outcome__in=list(DUPLICATE_OUTCOMES))
        .values_list("receipt_id", "outcome")
        .annotate(n=Count("*"))
        .order_by()
    )
    for pk, outcome, n in rows:
        counts[pk][DUPLICATE_OUTCOMES[outcome]] += n
    return counts


# --- what audit entries are about --------------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """An audited object as the audit log names it: by its key or event id, with a link."""

    name: str
    url: str
    scope: str = ""


# object_type -> (noun, rows by id, their Subject), for the objects that have a page. The
# others are named by the name stored with the entry (AuditEntry.object_name).
AUDIT_SUBJECTS: dict[str, tuple[str, Any, Any]] = {
    "idemdash_core.bulkrun": (
        "bulk run", lambda: BulkRun.objects.only("title"),
        lambda run: Subject(run.title, reverse("dashboard:bulk_run", args=[run.pk])),
    ),
    "receipts.receipt": (
        "receipt", lambda: Receipt.objects.only("key", "scope"),
        lambda r: Subject(r.key, reverse("dashboard:receipt", args=[r.pk]), r.scope),
    ),
    "webhooks.webhookevent": (
        "webhook event",
        lambda: WebhookEvent.objects.select_related("endpoint").only("provider_event_id", "dedupe_key", "endpoint__slug"),
        lambda e: Subject(e.provider_event_id or e.dedupe_key, reverse("dashboard:event", args=[e.pk]), e.endpoint.slug),
    ),
    "outbox.outboxmessage": (
        "outbox message", lambda: OutboxMessage.objects.only("key", "scope"),
        lambda m: Subject(m.key, reverse("dashboard:message", args=[m.pk]), m.scope),
    ),
    "idemdash_dashboard.incident": (
        "incident", lambda: apps.get_model("idemdash_dashboard", "Incident").objects.select_related("alert"),
        lambda i: Subject(f"#{i.pk} {i.alert.rule_name}", reverse("dashboard:incident", args=[i.pk])),
    ),
}


# Every kind of object the audit log names, by its stored object_type: the audit filter's choices.
AUDIT_NOUNS: dict[str, str] = {
    **{object_type: noun for object_type, (noun, _, _) in AUDIT_SUBJECTS.items()},
    "webhooks.webhookendpoint": "webhook endpoint",
    "idemdash_dashboard.alertrule": "alert rule",
    "devtools.demoswitch": "demo switch",
    "idemdash_core.apiclient": "API client",
    "outbox.outboxpause": "outbox pause",
    "idemdash_core.failuregroup": "failure group",
}

# The operator's verb for each audit action, as the log shows it and its Action filter takes it
# (docs/architecture.md section 8); tests/dashboard/test_audit_log.py checks that every action
# the code records has one.
AUDIT_VERBS: dict[str, str] = {
    "receipt.release": "Release",
    "receipt.mark_completed": "Mark completed",
    "receipt.run_again": "Run again",
    "webhook_event.reprocess": "Reprocess",
    "webhook_event.release": "Release (stuck)",
    "outbox_message.send_now": "Send now",
    "outbox_message.send_again": "Send again",
    "outbox_message.release": "Release (stuck)",
    "webhook_endpoint.pause": "Pause endpoint",
    "webhook_endpoint.resume": "Resume endpoint",
    "bulk_run.start": "Start bulk run",
    "bulk_run.cancel": "Cancel bulk run",
    "outbox_pause.pause": "Pause sending",
    "outbox_pause.resume": "Resume sending",
    "incident.acknowledge": "Acknowledge incident",
    "failure_group.acknowledge": "Acknowledge failures",
    "failure_group.resolve": "Resolve failures",
    "alert_rule.create": "Add alert rule",
    "alert_rule.update": "Change alert rule",
    "alert_rule.delete": "Delete alert rule",
    "alert_rule.evaluate": "Evaluate alert rule",
    "apiclient.create": "Add API client",
    "apiclient.revoke": "Revoke API client",
    "demo_switch.break": "Break (demo)",
    "demo_switch.fix": "Fix (demo)",
}


def audit_actions(named: str) -> list[str]:
    """The stored actions an Action filter names: the stored name itself, and every action
    whose verb it is, in any case ("Release" is receipt.release; "release (stuck)" both kinds')."""
    wanted = named.strip().casefold()
    return [named.strip(), *(action for action, verb in AUDIT_VERBS.items() if verb.casefold() == wanted)]


# A webhook handler that fans out may enqueue many messages: its page lists the first ones.
CAUSED_LIMIT = 50


def causation(unit: Any) -> dict[str, Any]:
    """A detail page's references block (templates/dashboard/partials/references_card.html):
    what the receipt, event or message refers to; for a receipt or an event, the outbox
    messages enqueued while it ran; for a message, what it was enqueued under."""
    shown: dict[str, Any] = {"references": list(unit.references.order_by("created_at", "pk"))}
    if isinstance(unit, OutboxMessage):
        shown["cause"] = references.cause_of(unit)
        shown["cause_kind"], shown["cause_id"] = unit.cause_kind, unit.cause_id
    else:
        caused = references.caused_by(unit)
        shown["caused"] = list(caused[:CAUSED_LIMIT])
        shown["caused_total"] = caused.count() if len(shown["caused"]) == CAUSED_LIMIT else len(shown["caused"])
    return shown


def audit_of(obj: Any, limit: int = 20) -> list[AuditEntry]:
    """A detail page's audit block: the object's latest entries, named as the audit log
    names them."""
    entries = list(AuditEntry.objects.filter(object_type=obj._meta.label_lower, object_id=str(obj.pk)).order_by("-id")[:limit])
    name_audit_subjects(entries)
    return entries


def name_audit_subjects(entries: list[AuditEntry]) -> None:
    """Give each entry its `noun` and `subject` (None once the object is purged: the page
    shows the name stored with the entry), and a bulk run's entry how many entries its items
    wrote: one query per kind of object on the page."""
    wanted: dict[str, set[int]] = {}
    for e in entries:
        if e.object_type in AUDIT_SUBJECTS and e.object_id.isdigit():
            wanted.setdefault(e.object_type, set()).add(int(e.object_id))
    found: dict[tuple[str, str], Subject] = {}
    for object_type, ids in wanted.items():
        _, rows, display = AUDIT_SUBJECTS[object_type]
        for obj in rows().filter(pk__in=ids):
            found[object_type, str(obj.pk)] = display(obj)
    runs = AuditEntry.objects.filter(run_id__in=wanted.get("idemdash_core.bulkrun", ()))
    items = {str(run): n for run, n in runs.values_list("run_id").annotate(n=Count("*")).order_by()}
    for e in entries:
        e.noun = AUDIT_NOUNS.get(e.object_type, e.object_type)
        e.subject = found.get((e.object_type, e.object_id))
        e.gone = e.object_type in AUDIT_SUBJECTS and e.subject is None  # purged or deleted since
        # A run's own entry: how many entries its items wrote (grouped under it).
        e.items = items.get(e.object_id, 0) if e.object_type == "idemdash_core.bulkrun" else 0


@dataclass(frozen=True)
class PausedWork:
    """What operators paused and what waits behind it: the outbox's pauses with their
    backlogs (receipts/outbox/pauses.py) and every webhook endpoint with its held events
    (webhooks/endpoints.py), for the Paused page, the outbox and events pages and the overview."""

    outbox: list[Any]
    endpoints: list[Any]

    @property
    def paused_endpoints(self) -> list[Any]:
        return [b for b in self.endpoints if b.endpoint.paused]

    @property
    def any(self) -> bool:
        return bool(self.outbox or self.paused_endpoints)


def paused_work() -> PausedWork:
    return PausedWork(
        outbox=pauses.paused(),
        endpoints=[endpoints.backlog(e) if e.paused else endpoints.Backlog(e, 0, None)
                   for e in WebhookEndpoint.objects.order_by("slug")],
    )


def fresh_key_series(window: Window, now: datetime | None = None) -> list[dict[str, Any]]:
    """Fresh-key retries per bucket, every bucket present, oldest first: those that ran again
    (`ran_again`) and those refused (`refused`), adding up to `fresh_key_stats`."""
    now = now or timezone.now()
    buckets = _empty_buckets(window, now, ["ran_again", "refused"])
    for retry in fresh_keys.retries(window_start(window, now), now):
        bucket = buckets.get(_floor(retry["at"], window.bucket))
        if bucket is not None:
            bucket["refused" if retry["refused"] else "ran_again"] += 1
    return list(buckets.values())


# --- failure groups (idemdash/core/failures.py) ----------------------------------------------

# Per kind of unit a group counts: its model, its list's and its page's URL names, and its
# dead status (what the list's bulk action repairs).
FAILING_UNITS = {
    "event": (WebhookEvent, "dashboard:events", "dashboard:event", WebhookEvent.Status.DEAD),
    "message": (OutboxMessage, "dashboard:outbox", "dashboard:message", OutboxMessage.Status.DEAD),
}


def with_failing_units(groups: list[FailureGroup]) -> list[FailureGroup]:
    """Each group with the units whose last failure is in it now (`units`: status, count and
    the list filtered to them, one query per kind), how many of them are dead (`dead`), and
    its latest failing unit's page (`sample_url`)."""
    for kind, (model, listing, page, dead) in FAILING_UNITS.items():
        mine = [g for g in groups if g.kind == kind]
        counts = (model.objects.filter(failure_signature__in=[g.signature for g in mine])
                  .values_list("failure_signature", "status").annotate(n=Count("pk")))
        by_group: dict[str, list] = {}
        for signature, status, n in counts:
            by_group.setdefault(signature, []).append((status, n, f"{reverse(listing)}?group={signature}&status={status}"))
        for group in mine:
            group.sample_url = reverse(page, args=[group.sample_id])
            group.units = sorted(by_group.get(group.signature, []))
            group.dead = sum(n for status, n, _ in group.units if status == dead)
    return groups


def failing_groups(since: datetime) -> QuerySet[FailureGroup]:
    """The open groups that failed since `since` and hold a dead unit now: what the overview's
    first line names and the `failing_groups` alert counts. A group whose units all recovered
    on their own retries is no one's problem; an acknowledged one has someone on it."""
    dead_now = Q()
    for kind, (model, _, _, dead) in FAILING_UNITS.items():
        dead_now |= Q(kind=kind) & Exists(model.objects.filter(status=dead, failure_signature=OuterRef("signature")))
    return FailureGroup.objects.filter(dead_now, state=FailureGroup.State.OPEN, last_seen__gte=since)


def failure_culprits(since: datetime, limit: int = 3) -> list[FailureGroup]:
    """The failing groups with the most failures, with their units."""
    return with_failing_units(list(failing_groups(since).order_by("-failures", "-last_seen")[:limit]))
