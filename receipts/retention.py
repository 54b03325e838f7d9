"""Retention: delete what has outlived its use, in bounded batches.

Each batch is one short transaction: select up to `batch_size` ids of due rows, run the
purger's archive step on exactly those rows, delete them. No statement ever touches the
whole table, so request traffic keeps flowing while a purge runs. On PostgreSQL the ids
are taken with FOR UPDATE SKIP LOCKED, so a purge never waits on (or blocks) a row that a
request is using; on SQLite the IMMEDIATE transaction serialises it with other writers.
The delete repeats the "due" condition, so a row that stopped being due between the
SELECT and the DELETE (an expired receipt claimed again, say) is kept.

Every installed app may have a `retention` module with a `PURGERS` list (a name and a
function `due(now)` returning the queryset of rows to delete); `installed_purgers()`
collects them, so this app never imports the apps it purges for.

The dashboard's charts count Attempt and OutboxAttempt rows, which keep scope, key and
operation of their own and only lose their link when a receipt or message goes. They are
kept 35 days, longer than the widest (30-day) chart window, so purging receipts never
changes a chart. The hourly roll-up of the attempt log (`receipts.rollup`) has its own
retention (RECEIPTS_ROLLUP_RETENTION_DAYS, 90 days, never under 31).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from datetime import datetime, timedelta

from django.apps import apps
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from receipts.conf import policy_for
from receipts.models import ArchivedReceipt, Attempt, AttemptHourly, Receipt

Due = Callable[[datetime], QuerySet]
Archive = Callable[[QuerySet, datetime], int]


@dataclass(frozen=True)
class Purger:
    name: str
    due: Due
    archive: Archive | None = None
    # The order batches are taken in: the column `due` filters on, when it is indexed, so
    # that each batch is an index range scan that stops after batch_size rows. Taking them
    # by pk instead walks past every not-yet-due row with a lower id on every batch.
    order_by: str = "pk"


def due_receipts(now: datetime) -> QuerySet:
    # A receipt whose worker still holds a live lease is left alone until the worker is
    # done or gone, even past its expiry.
    return Receipt.objects.filter(expires_at__lt=now).exclude(
        Q(status=Receipt.Status.PROCESSING) & Q(lease_expires_at__gt=now)
    )


def due_attempts(now: datetime) -> QuerySet:
    days = getattr(settings, "RECEIPTS_ATTEMPT_RETENTION_DAYS", 35)
    return Attempt.objects.filter(created_at__lt=now - timedelta(days=days))


def due_attempt_rollups(now: datetime) -> QuerySet:
    # Their own retention: purging the attempt log (35 days) must not take the hourly
    # counts of the 30-day charts with it.
    days = getattr(settings, "RECEIPTS_ROLLUP_RETENTION_DAYS", 90)
    return AttemptHourly.objects.filter(hour__lt=now - timedelta(days=days))


def archive_financial_receipts(batch: QuerySet, now: datetime) -> int:
    """Copy the financial receipts of a batch into ArchivedReceipt (same transaction)."""
    copies = [
        ArchivedReceipt(
            original_id=receipt.pk,
            archived_at=now,
            **{name: getattr(receipt, name) for name in ArchivedReceipt.COPIED},
        )
        for receipt in batch
        if policy_for(receipt.operation).financial
    ]
    ArchivedReceipt.objects.bulk_create(copies)
    return len(copies)


PURGERS: list[Purger] = [
    Purger("receipts.expired", due_receipts, archive=archive_financial_receipts, order_by="expires_at"),
    Purger("receipts.attempts", due_attempts, order_by="created_at"),
    Purger("receipts.attempt_rollups", due_attempt_rollups, order_by="hour"),
]


def installed_purgers() -> list[Purger]:
    """The PURGERS of every installed app's `retention` module, in INSTALLED_APPS order."""
    found: list[Purger] = []
    for config in apps.get_app_configs():
        try:
            module = import_module(f"{config.name}.retention")
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.retention":
                raise
            continue
        found.extend(getattr(module, "PURGERS", []))
    return found


@dataclass
class PurgeResult:
    name: str
    due: int = 0
    deleted: int = 0
    archived: int = 0
    batches: int = 0


def purge_batches(
    purger: Purger,
    now: datetime,
    *,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
    max_batches: int | None = None,
) -> PurgeResult:
    """Delete the purger's due rows, one bounded transaction per batch."""
    result = PurgeResult(purger.name)
    while max_batches is None or result.batches < max_batches:
        with transaction.atomic():
            due = purger.due(now)
            candidates = due.order_by(purger.order_by)
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True)
            ids = list(candidates.values_list("pk", flat=True)[:batch_size])
            if not ids:
                break
            batch = due.filter(pk__in=ids)
            if purger.archive is not None:
                result.archived += purger.archive(batch, now)
            # _raw_delete would skip the SET_NULL of Attempt.receipt; delete() does it,
            # for this batch's ids only.
            deleted = sum(
                count for label, count in batch.delete()[1].items() if label == due.model._meta.label
            )
        result.batches += 1
        result.deleted += deleted
        if on_batch is not None:
            on_batch(deleted)
        if len(ids) < batch_size:
            break
    return result


def purge(
    *,
    now: datetime | None = None,
    batch_size: int | None = None,
    dry_run: bool = False,
    purgers: list[Purger] | None = None,
    progress: Callable[[Purger, int], Callable[[int], None] | None] | None = None,
) -> list[PurgeResult]:
    """Run every purger. With `dry_run`, count what is due and delete nothing.

    `progress(purger, due_count)` may return a callback that receives each batch's count
    (the purge command hangs a progress bar on it).
    """
    now = now or timezone.now()
    batch_size = batch_size or getattr(settings, "RETENTION_BATCH_SIZE", 1000)
    results = []
    for purger in purgers if purgers is not None else installed_purgers():
        due_count = purger.due(now).count()
        if dry_run:
            results.append(PurgeResult(purger.name, due=due_count))
            continue
        on_batch = progress(purger, due_count) if progress else None
        result = purge_batches(purger, now, batch_size=batch_size, on_batch=on_batch)
        result.due = due_count
        results.append(result)
    return results
