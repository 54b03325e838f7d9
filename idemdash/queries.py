"""Read-side aggregates for the overview, /api/v1/stats and /metrics.

One function per block of the stats document (`receipt_stats`; `webhook_stats` and
`outbox_stats` join it the same way), each taking the window and the instant it ends, so
that the JSON, the tiles and the metrics are computed once from the same numbers.
Each figure family is one grouped query, never a query per figure or per bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.db.models import Count
from django.db.models.functions import TruncDay, TruncHour, TruncMinute
from django.utils import timezone

from receipts.models import Attempt, Receipt

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


class BadWindow(ValueError):
    pass


def parse_window(value: str | None) -> Window:
    if value in (None, ""):
        return WINDOWS[DEFAULT_WINDOW]
    try:
        return WINDOWS[value]
    except KeyError:
        raise BadWindow(f"window must be one of {', '.join(WINDOWS)}; got {value!r}") from None


# The documentation of every figure: the README table and the /metrics HELP lines come
# from here, so the definition lives in one place.
RECEIPT_FIELDS: dict[str, str] = {
    "requests": "Claim requests in the window (HTTP decorator and API alike): attempts with "
    "outcome claimed, replayed, in_progress, mismatch, retried_after_failure or lease_takeover.",
    "claimed": "Claim requests that were allowed to run the operation: claimed + "
    "retried_after_failure + lease_takeover.",
    "replayed": "Claim requests answered from a stored result (outcome replayed).",
    "in_progress_conflicts": "Claim requests answered 409 because the key was still processing.",
    "mismatch_conflicts": "Claim requests answered 422 because the key was reused with a different request.",
    "duplicate_rate": "(replayed + in_progress_conflicts + mismatch_conflicts) / requests; 0 when "
    "there were no requests. A fraction between 0 and 1, rounded to 4 decimals.",
    "failed": "Receipts now in status failed (failed attempts and operator releases) whose last "
    "change falls in the window: the keys a bulk retry of that window would touch.",
    "stuck": "Receipts processing past their lease right now (independent of the window).",
}


# block -> field -> definition, for every block of `overview_stats`.
FIELD_DOCS: dict[str, dict[str, str]] = {"receipts": RECEIPT_FIELDS}


def window_start(window: Window, now: datetime) -> datetime:
    return now - window.span


def _outcome_counts(start: datetime, now: datetime) -> dict[str, int]:
    rows = (
        Attempt.objects.filter(created_at__gt=start, created_at__lte=now)
        .values_list("outcome")
        .annotate(n=Count("*"))
        .order_by()
    )
    return dict(rows)


def receipt_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    start = window_start(window, now)
    counts = _outcome_counts(start, now)
    requests = sum(counts.get(o, 0) for o in Attempt.CLAIM_OUTCOMES)
    replayed = counts.get(Outcome.REPLAYED, 0)
    in_progress = counts.get(Outcome.IN_PROGRESS, 0)
    mismatch = counts.get(Outcome.MISMATCH, 0)
    claimed = sum(
        counts.get(o, 0)
        for o in (Outcome.CLAIMED, Outcome.RETRIED_AFTER_FAILURE, Outcome.LEASE_TAKEOVER)
    )
    return {
        "requests": requests,
        "claimed": claimed,
        "replayed": replayed,
        "in_progress_conflicts": in_progress,
        "mismatch_conflicts": mismatch,
        "duplicate_rate": round((replayed + in_progress + mismatch) / requests, 4) if requests else 0.0,
        "failed": failed_receipts(start, now).count(),
        "stuck": stuck_receipts(now).count(),
    }


def failed_receipts(start: datetime | None = None, end: datetime | None = None):
    qs = Receipt.objects.filter(status=Receipt.Status.FAILED)
    if start is not None:
        qs = qs.filter(updated_at__gt=start)
    if end is not None:
        qs = qs.filter(updated_at__lte=end)
    return qs


def stuck_receipts(now: datetime | None = None):
    """Processing past the lease, oldest lease first (served by the partial index)."""
    now = now or timezone.now()
    return Receipt.objects.filter(
        status=Receipt.Status.PROCESSING, lease_expires_at__lt=now
    ).order_by("lease_expires_at", "id")


def overview_stats(window: Window, now: datetime | None = None) -> dict[str, Any]:
    """The whole stats document. Add a block by adding its function here."""
    now = now or timezone.now()
    return {
        "window": window.name,
        "receipts": receipt_stats(window, now),
    }


# --- time series for the charts ------------------------------------------------------------

SERIES_OUTCOMES = (
    Outcome.CLAIMED,
    Outcome.REPLAYED,
    Outcome.IN_PROGRESS,
    Outcome.MISMATCH,
    Outcome.RETRIED_AFTER_FAILURE,
    Outcome.LEASE_TAKEOVER,
    Outcome.RELEASED,
)


def _floor(moment: datetime, bucket: timedelta) -> datetime:
    step = int(bucket.total_seconds())
    seconds = int(moment.timestamp()) // step * step
    return datetime.fromtimestamp(seconds, tz=dt_timezone.utc)


def receipt_series(window: Window, now: datetime | None = None) -> list[dict[str, Any]]:
    """Attempt outcomes per time bucket, every bucket present (zeros included), oldest first.

    One grouped query truncates to minute/hour/day in SQL; the few hundred rows it returns
    are folded into the window's buckets here, which works the same on both databases.
    """
    now = now or timezone.now()
    start = window_start(window, now)
    rows = (
        Attempt.objects.filter(created_at__gt=start, created_at__lte=now, outcome__in=SERIES_OUTCOMES)
        .annotate(t=window.trunc("created_at", tzinfo=dt_timezone.utc))
        .values_list("t", "outcome")
        .annotate(n=Count("*"))
        .order_by()
    )
    buckets: dict[datetime, dict[str, Any]] = {}
    moment = _floor(start, window.bucket)
    while moment <= now:
        buckets[moment] = {"start": moment, **{o.value: 0 for o in SERIES_OUTCOMES}}
        moment += window.bucket
    for t, outcome, n in rows:
        bucket = buckets.get(_floor(t, window.bucket))
        if bucket is not None:
            bucket[outcome] += n
    series = list(buckets.values())
    for b in series:
        b["requests"] = sum(b[o] for o in SERIES_OUTCOMES if o in Attempt.CLAIM_OUTCOMES)
        b["duplicates"] = b[Outcome.REPLAYED] + b[Outcome.IN_PROGRESS] + b[Outcome.MISMATCH]
    return series
