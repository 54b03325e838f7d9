"""Receipt compaction: a completed receipt keeps its request and response bodies (most of its
bytes) for its operation's `compact_after_seconds`, the rest until it expires, so that a late
retry still does not run twice; its replay then answers 410 `receipt-compacted`. Failed
receipts are never compacted: their error is what an operator diagnoses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from receipts.conf import policy_for, setting
from receipts.models import Receipt


@dataclass
class CompactionResult:
    operation: str
    compacted: int = 0
    batches: int = 0


def _compactable() -> QuerySet:
    # receipt_compactable's condition, verbatim, so the planner uses it.
    return Receipt.objects.filter(status=Receipt.Status.COMPLETED, compacted_at=None)


def compactable_operations() -> list[str]:
    """The operations with receipts to compact: on PostgreSQL a loose index scan, not a DISTINCT."""
    if connection.vendor != "postgresql":
        return sorted(_compactable().values_list("operation", flat=True).distinct())
    table = connection.ops.quote_name(Receipt._meta.db_table)
    where = "status = 'completed' AND compacted_at IS NULL"
    with connection.cursor() as c:
        c.execute(f"""
            WITH RECURSIVE ops(operation) AS (
                (SELECT operation FROM {table} WHERE {where} ORDER BY operation LIMIT 1)
                UNION ALL
                SELECT (SELECT operation FROM {table} WHERE {where} AND operation > ops.operation
                        ORDER BY operation LIMIT 1)
                FROM ops WHERE ops.operation IS NOT NULL
            )
            SELECT operation FROM ops WHERE operation IS NOT NULL
        """)
        return [row[0] for row in c.fetchall()]


def due(operation: str, now: datetime, window: timedelta) -> QuerySet:
    """The operation's completed receipts claimed more than `window` ago, not yet compacted."""
    return _compactable().filter(operation=operation, created_at__lt=now - window)


def compact_batch(operation: str, now: datetime, window: timedelta, batch_size: int) -> tuple[int, int]:
    """One short batch, in its own transaction: (taken, compacted). The ids are taken SKIP
    LOCKED where the database can, and the UPDATE repeats the due condition, so a receipt
    that stopped being due meanwhile is left alone."""
    with transaction.atomic():
        candidates = due(operation, now, window).order_by("created_at")
        if connection.features.has_select_for_update_skip_locked:
            candidates = candidates.select_for_update(skip_locked=True)
        ids = list(candidates.values_list("pk", flat=True)[:batch_size])
        if not ids:
            return 0, 0
        compacted = due(operation, now, window).filter(pk__in=ids).update(
            request=None, response_body="", compacted_at=now
        )
    return len(ids), compacted


def compact(
    *, now: datetime | None = None, batch_size: int | None = None, max_batches: int | None = None
) -> list[CompactionResult]:
    """Compact every operation whose policy has a window, at most max_batches per operation."""
    now = now or timezone.now()
    batch_size = batch_size or setting("RECEIPTS_RETENTION_BATCH_SIZE")
    results = []
    for operation in compactable_operations():
        window = policy_for(operation).compact_after
        if window is None:
            continue
        result = CompactionResult(operation)
        while max_batches is None or result.batches < max_batches:
            taken, compacted = compact_batch(operation, now, window, batch_size)
            if not taken:
                break
            result.batches += 1
            result.compacted += compacted
            if taken < batch_size:
                break
        results.append(result)
    return results
