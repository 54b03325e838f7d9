"""The receipts app's retention (the machinery is `idemdash.core.retention`'s): expired
receipts (financial ones archived first), the attempt log (kept longer than the widest chart
window), its roll-ups, the audit log, finished bulk runs, the observer's notes."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q, QuerySet

from idemdash.core import retention as core_retention
from idemdash.core.audit import AuditEntry
from idemdash.core.bulk_runs import BulkRun
from idemdash.core.retention import Purger, PurgeResult
from receipts import fresh_keys, observe, rollup, rules, store
from receipts.archive import archive_financial_receipts
from receipts.conf import setting
from receipts.models import Attempt, Receipt, ReceiptReference


def due_receipts(now: datetime) -> QuerySet:
    # Expired, unless a worker still holds a live lease on it.
    return Receipt.objects.filter(rules.EXPIRED.q(now=now)).exclude(
        Q(status=Receipt.Status.PROCESSING) & Q(lease_expires_at__gt=now)
    )


def due_attempts(now: datetime) -> QuerySet:
    days = setting("RECEIPTS_ATTEMPT_RETENTION_DAYS")
    return Attempt.objects.filter(created_at__lt=now - timedelta(days=days))


def due_audit_entries(now: datetime) -> QuerySet:
    days = setting("RECEIPTS_AUDIT_RETENTION_DAYS")
    return AuditEntry.objects.filter(created_at__lt=now - timedelta(days=days))


def due_bulk_runs(now: datetime) -> QuerySet:
    # What each item changed stays in the audit log; a run still going is never due.
    days = setting("RECEIPTS_BULK_RUN_RETENTION_DAYS")
    return BulkRun.objects.filter(
        status__in=(BulkRun.Status.FINISHED, BulkRun.Status.CANCELLED), updated_at__lt=now - timedelta(days=days)
    )


def expired_receipts_batch(due: QuerySet, now: datetime, batch_size: int) -> tuple[int, int, int] | None:
    """PostgreSQL's batch in one statement (receipts/pg.py); None elsewhere: the generic batch."""
    return store.path().purge_expired_receipts(due, now, batch_size)


PURGERS: list[Purger] = [
    Purger(
        "receipts.expired",
        due_receipts,
        archive=archive_financial_receipts,
        order_by="expires_at",
        batch=expired_receipts_batch,
        follows=(ReceiptReference,),
    ),
    Purger("receipts.attempts", due_attempts, order_by="created_at"),
    Purger("receipts.attempt_rollups", rollup.ATTEMPTS.expired, archive=rollup.ATTEMPTS.carry, order_by="hour"),
    Purger("receipts.claim_duration_rollups", rollup.CLAIMS.expired, archive=rollup.CLAIMS.carry, order_by="hour"),
    Purger("receipts.audit", due_audit_entries, order_by="created_at"),
    Purger("receipts.bulk_runs", due_bulk_runs, order_by="updated_at"),
    Purger("receipts.observed", observe.due_notes, order_by="at"),
    Purger("receipts.observed_rollups", rollup.OBSERVED.expired, archive=rollup.OBSERVED.carry, order_by="hour"),
    Purger("receipts.first_keys", fresh_keys.due_first_keys, order_by="created_at"),
]


def purge(*, batch_size: int | None = None, **options: Any) -> list[PurgeResult]:
    """The core's `purge` of every installed app's purgers: the receipts app hosts it."""
    return core_retention.purge(batch_size=batch_size or setting("RECEIPTS_RETENTION_BATCH_SIZE"), **options)
