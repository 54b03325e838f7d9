"""The receipts app's retention: expired receipts (financial ones archived first), the
attempt log, its roll-up, the audit log and finished bulk runs. The machinery is `idemdash.core.retention`'s.

The dashboard's charts count Attempt and OutboxAttempt rows (through their hourly
roll-ups), which keep scope, key and operation of their own. An attempt keeps the id of its
purged receipt (a plain column, no constraint); an outbox attempt's link to its message is
set to NULL. They are kept 35 days, longer than the widest (30-day) chart window, so purging
receipts never changes a chart. The hourly roll-up of the attempt log (`receipts.rollup`)
has its own retention (RECEIPTS_ROLLUP_RETENTION_DAYS, 90 days; the project's settings take
no fewer than 31 from the environment, but a host's own setting is used as it is)."""

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
    # Expired (rules.EXPIRED: a permanent receipt, expires_at NULL, never is). A receipt
    # whose worker still holds a live lease is left alone until the worker is done or gone,
    # even past its expiry.
    return Receipt.objects.filter(rules.EXPIRED.q(now=now)).exclude(
        Q(status=Receipt.Status.PROCESSING) & Q(lease_expires_at__gt=now)
    )


def due_attempts(now: datetime) -> QuerySet:
    days = setting("RECEIPTS_ATTEMPT_RETENTION_DAYS")
    return Attempt.objects.filter(created_at__lt=now - timedelta(days=days))


def due_audit_entries(now: datetime) -> QuerySet:
    # Who did what is kept long (a year by default) but not forever. The dashboard charts
    # operator releases from it over its 30-day window, so the project's settings take no
    # fewer than 31 days from the environment; a host's own setting is used as it is.
    days = setting("RECEIPTS_AUDIT_RETENTION_DAYS")
    return AuditEntry.objects.filter(created_at__lt=now - timedelta(days=days))


def due_bulk_runs(now: datetime) -> QuerySet:
    # A finished or cancelled bulk run (and its items, one per row it was started on, up to
    # 5,000) is the progress page of work long done; what each item changed stays in the
    # audit log, kept longer. A run still queued or running is never due, however old: the
    # worker resumes it (idemdash/core/bulk_runs.py: resume_stalled).
    days = setting("RECEIPTS_BULK_RUN_RETENTION_DAYS")
    return BulkRun.objects.filter(
        status__in=(BulkRun.Status.FINISHED, BulkRun.Status.CANCELLED), updated_at__lt=now - timedelta(days=days)
    )


def expired_receipts_batch(due: QuerySet, now: datetime, batch_size: int) -> tuple[int, int, int] | None:
    """PostgreSQL's batch of expired receipts in one statement (receipts/pg.py); the ORM
    path's twin leaves it to the generic batch."""
    return store.path().purge_expired_receipts(due, now, batch_size)


PURGERS: list[Purger] = [
    Purger(
        "receipts.expired",
        due_receipts,
        archive=archive_financial_receipts,
        order_by="expires_at",
        batch=expired_receipts_batch,
        # The batch deletes the receipts' references with them (receipts/pg.py).
        follows=(ReceiptReference,),
    ),
    Purger("receipts.attempts", due_attempts, order_by="created_at"),
    # Its own retention: purging the attempt log (35 days) must not take the hourly counts
    # of the 30-day charts with it.
    Purger("receipts.attempt_rollups", rollup.ATTEMPTS.expired, archive=rollup.ATTEMPTS.carry, order_by="hour"),
    Purger("receipts.claim_duration_rollups", rollup.CLAIMS.expired, archive=rollup.CLAIMS.carry, order_by="hour"),
    Purger("receipts.audit", due_audit_entries, order_by="created_at"),
    # The (status, updated_at) index `bulk_run_active` serves both the filter and the order.
    Purger("receipts.bulk_runs", due_bulk_runs, order_by="updated_at"),
    Purger("receipts.observed", observe.due_notes, order_by="at"),
    Purger("receipts.observed_rollups", rollup.OBSERVED.expired, archive=rollup.OBSERVED.carry, order_by="hour"),
    Purger("receipts.first_keys", fresh_keys.due_first_keys, order_by="created_at"),
]


def purge(*, batch_size: int | None = None, **options: Any) -> list[PurgeResult]:
    """The core's `purge` of every installed app's purgers, RECEIPTS_RETENTION_BATCH_SIZE rows
    a batch unless told: the receipts app hosts the project-wide purge (its command and
    schedule), so the setting is its."""
    return core_retention.purge(batch_size=batch_size or setting("RECEIPTS_RETENTION_BATCH_SIZE"), **options)
