"""The receipts app's retention: expired receipts (financial ones archived first), the
attempt log, its roll-up and the audit log. The machinery is `idemdash.core.retention`'s.

The dashboard's charts count Attempt and OutboxAttempt rows, which keep scope, key and
operation of their own. An attempt keeps the id of its purged receipt (a plain column, no
constraint); an outbox attempt's link to its message is set to NULL. They are
kept 35 days, longer than the widest (30-day) chart window, so purging receipts never
changes a chart. The hourly roll-up of the attempt log (`receipts.rollup`) has its own
retention (RECEIPTS_ROLLUP_RETENTION_DAYS, 90 days, never under 31).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection, connections
from django.db.models import Q, QuerySet

from idemdash.core import retention as core_retention
from idemdash.core.audit import AuditEntry
from idemdash.core.retention import Purger, PurgeResult
from receipts import rollup
from receipts.conf import policy_for, setting
from receipts.models import ArchivedReceipt, Attempt, Receipt

# Moved to idemdash.core.retention; kept for one release.
from idemdash.core.retention import delete_rows, installed_purgers, purge_batches  # noqa: F401


def due_receipts(now: datetime) -> QuerySet:
    # A receipt whose worker still holds a live lease is left alone until the worker is
    # done or gone, even past its expiry.
    return Receipt.objects.filter(expires_at__lt=now).exclude(
        Q(status=Receipt.Status.PROCESSING) & Q(lease_expires_at__gt=now)
    )


def due_attempts(now: datetime) -> QuerySet:
    days = setting("RECEIPTS_ATTEMPT_RETENTION_DAYS")
    return Attempt.objects.filter(created_at__lt=now - timedelta(days=days))


def due_audit_entries(now: datetime) -> QuerySet:
    # Who did what is kept long (a year by default) but not forever; never under 31 days,
    # because the dashboard charts operator releases from it over its 30-day window.
    days = setting("RECEIPTS_AUDIT_RETENTION_DAYS")
    return AuditEntry.objects.filter(created_at__lt=now - timedelta(days=days))


def _financial(operations) -> list[str]:
    """Which of `operations` are financial, by the same policy lookup as a claim (RECEIPTS_OPERATIONS
    and RECEIPTS_FINANCIAL_OPERATIONS): their receipts are archived before they are deleted."""
    return sorted({op for op in operations if policy_for(op).financial})


def _insert_into_archive(db) -> str:
    """`INSERT INTO` the archive's columns: the receipt's id, its COPIED columns in that
    order, and the time it was archived; for a SELECT of the same shape to follow."""
    opts = ArchivedReceipt._meta
    columns = ["original_id", *(opts.get_field(name).column for name in ArchivedReceipt.COPIED), "archived_at"]
    return f"INSERT INTO {db.ops.quote_name(opts.db_table)} ({', '.join(map(db.ops.quote_name, columns))})"


def archive_financial_receipts(batch: QuerySet, now: datetime) -> int:
    """Copy the financial receipts of a batch into ArchivedReceipt (same transaction).

    Which operations are financial is decided here, by the same policy lookup as a claim
    (RECEIPTS_OPERATIONS and RECEIPTS_FINANCIAL_OPERATIONS); the rows are copied by the database with one
    INSERT ... SELECT, never loaded into Python.
    """
    financial = _financial(batch.order_by().values_list("operation", flat=True).distinct())
    if not financial:
        return 0
    rows = batch.filter(operation__in=financial).order_by().values_list("pk", *ArchivedReceipt.COPIED)
    db = connections[rows.db]
    select, params = rows.query.get_compiler(using=rows.db).as_sql()
    # The ORM has no INSERT ... SELECT. The SELECT is the ORM's own (the batch's conditions,
    # the columns in COPIED order), so only the INSERT around it is written here; it runs as
    # is on PostgreSQL and SQLite.
    sql = f"{_insert_into_archive(db)} SELECT copied.*, %s FROM ({select}) copied"
    with db.cursor() as cursor:
        cursor.execute(sql, [db.ops.adapt_datetimefield_value(now), *params])
        return cursor.rowcount


def purge_expired_receipts_postgresql(now: datetime, batch_size: int) -> tuple[int, int, int]:
    """One batch of expired receipts in two statements: lock the batch's ids (with their
    operations, so the policy decides here which are financial), then delete them with
    `DELETE ... RETURNING` feeding the archive's INSERT. The generic path reads the batch's
    rows four times (ids, operations, archive, delete); this reads them twice, and a heap
    page dirtied by the delete is the page the archive copy was read from.

    The ids are locked (FOR UPDATE SKIP LOCKED) in this transaction, so no claim can take
    one of them back between the two statements; the DELETE needs no second look at "due".
    Attempt rows stay (no constraint, DO_NOTHING); purge_batches uses this only while nothing
    else points at receipts (`_deletes_alone`).
    """
    rows = list(
        due_receipts(now).order_by("expires_at").select_for_update(skip_locked=True).values_list("pk", "operation")[:batch_size]
    )
    if not rows:
        return 0, 0, 0
    ids = [pk for pk, _ in rows]
    financial = _financial(op for _, op in rows)
    receipt = Receipt._meta
    q = connection.ops.quote_name
    with connection.cursor() as cursor:
        if not financial:
            cursor.execute(f"DELETE FROM {q(receipt.db_table)} WHERE id = ANY(%s)", [ids])
            return len(ids), cursor.rowcount, 0
        copied = [q(receipt.get_field(name).column) for name in ArchivedReceipt.COPIED]
        cursor.execute(
            f"""
            WITH gone AS (
                DELETE FROM {q(receipt.db_table)} WHERE id = ANY(%s) RETURNING id, {', '.join(copied)}
            ), kept AS (
                {_insert_into_archive(connection)}
                SELECT gone.*, %s FROM gone WHERE operation = ANY(%s) RETURNING 1
            )
            SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM kept)
            """,
            [ids, now, financial],
        )
        deleted, archived = cursor.fetchone()
    return len(ids), deleted, archived


PURGERS: list[Purger] = [
    Purger(
        "receipts.expired",
        due_receipts,
        archive=archive_financial_receipts,
        order_by="expires_at",
        postgresql_batch=purge_expired_receipts_postgresql,
    ),
    Purger("receipts.attempts", due_attempts, order_by="created_at"),
    # Its own retention: purging the attempt log (35 days) must not take the hourly counts
    # of the 30-day charts with it.
    Purger("receipts.attempt_rollups", rollup.ATTEMPTS.expired, order_by="hour"),
    Purger("receipts.audit", due_audit_entries, order_by="created_at"),
]


def purge(*, batch_size: int | None = None, **options: Any) -> list[PurgeResult]:
    """The core's `purge` of every installed app's purgers, RECEIPTS_RETENTION_BATCH_SIZE rows
    a batch unless told: the receipts app hosts the project-wide purge (its command and
    schedule), so the setting is its."""
    return core_retention.purge(batch_size=batch_size or setting("RECEIPTS_RETENTION_BATCH_SIZE"), **options)
