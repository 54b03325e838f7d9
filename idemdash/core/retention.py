"""Retention: delete what has outlived its use, in bounded batches.

Each batch is one short transaction over at most `batch_size` due rows (`purge_batches`): no
statement ever touches the whole table, so request traffic keeps flowing while a purge runs.

Every installed app may have a `retention` module with a `PURGERS` list (a name and a
function `due(now)` returning the queryset of rows to delete); `installed_purgers()`
collects them, so the core never imports the apps it purges for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.db.models import CASCADE, DO_NOTHING, SET_NULL, Model, QuerySet, signals
from django.db.models.deletion import get_candidate_relations_to_delete
from django.utils import timezone

from idemdash.core.discovery import declared_by_apps

Due = Callable[[datetime], QuerySet]
Archive = Callable[[QuerySet, datetime], int]
# (the due rows, now, batch_size) -> (taken, deleted, archived), or None.
Batch = Callable[[QuerySet, datetime, int], tuple[int, int, int] | None]


@dataclass(frozen=True)
class Purger:
    name: str
    due: Due
    archive: Archive | None = None
    # The order batches are taken in: the column `due` filters on, when it is indexed, so
    # that each batch is an index range scan that stops after batch_size rows. Taking them
    # by pk instead walks past every not-yet-due row with a lower id on every batch.
    order_by: str = "pk"
    # A whole batch written for this purger (one statement on PostgreSQL, say), in the
    # caller's transaction; it returns None to leave the batch to due/archive/delete_rows.
    # Used only while nothing else points at the rows but DO_NOTHING relations and the
    # models in `follows`, whose rows the batch deletes itself: it may delete with a plain DELETE.
    batch: Batch | None = None
    follows: tuple[type[Model], ...] = ()


def installed_purgers() -> list[Purger]:
    """The PURGERS of every installed app's `retention` module, in INSTALLED_APPS order."""
    return declared_by_apps("retention", "PURGERS")


@dataclass
class PurgeResult:
    name: str
    due: int = 0
    deleted: int = 0
    archived: int = 0
    batches: int = 0


def delete_rows(rows: QuerySet) -> int:
    """Delete `rows` and settle what points at them in SQL; return how many of `rows` went.

    QuerySet.delete() on a model that other tables point at loads every row (payloads
    included) into Python, collects the dependents, then deletes in chunks of 100 ids. Here
    each dependent table gets one statement keyed by a subquery of `rows` (CASCADE: the
    same, depth first; SET_NULL: one UPDATE; DO_NOTHING: nothing), then `rows` one DELETE,
    so a batch costs the same few statements however many dependents it has. A model this
    cannot settle so (delete signal receivers, PROTECT, RESTRICT, SET_DEFAULT, a parent
    table, generic relations, a cycle) goes through Django's collector as before.
    """
    if not _settles_in_sql(rows.model, ()):
        return rows.delete()[1].get(rows.model._meta.label, 0)
    for relation in get_candidate_relations_to_delete(rows.model._meta):
        field = relation.field
        dependents = relation.related_model._base_manager.using(rows.db).filter(
            **{f"{field.name}__in": rows.values(field.target_field.attname)}
        )
        if field.remote_field.on_delete is CASCADE:
            delete_rows(dependents)
        elif field.remote_field.on_delete is SET_NULL:
            dependents.update(**{field.name: None})
    return rows._raw_delete(rows.db)


def _deletes_alone(model: type[Model], follows: tuple[type[Model], ...] = ()) -> bool:
    """Can a row of `model` go with a plain DELETE: nothing points at it but DO_NOTHING
    relations (and the models in `follows`, which the caller deletes itself), and no delete
    signal listens?"""
    return _settles_in_sql(model, ()) and all(
        relation.field.remote_field.on_delete is DO_NOTHING or relation.related_model in follows
        for relation in get_candidate_relations_to_delete(model._meta)
    )


def _settles_in_sql(model: type[Model], seen: tuple[type[Model], ...]) -> bool:
    opts = model._meta
    if model in seen or opts.parents or signals.pre_delete.has_listeners(model) or signals.post_delete.has_listeners(model):
        return False
    if any(hasattr(field, "bulk_related_objects") for field in opts.private_fields):
        return False
    for relation in get_candidate_relations_to_delete(opts):
        on_delete = relation.field.remote_field.on_delete
        if on_delete is CASCADE:
            if not _settles_in_sql(relation.related_model, (*seen, model)):
                return False
        elif on_delete not in (SET_NULL, DO_NOTHING):
            return False
    return True


def purge_batches(
    purger: Purger,
    now: datetime,
    *,
    batch_size: int,
    on_batch: Callable[[int], None] | None = None,
    max_batches: int | None = None,
) -> PurgeResult:
    """Delete the purger's due rows, one bounded transaction per batch.

    A batch selects up to `batch_size` ids of due rows, runs the purger's archive step on
    exactly those rows, and deletes them (`delete_rows`: a few set-based statements however
    many rows point at the batch, not Django's collector, which loads them). On PostgreSQL
    the ids are taken with FOR UPDATE SKIP LOCKED, so a purge never waits on (or blocks) a row
    that a request is using; on SQLite the IMMEDIATE transaction serialises it with other
    writers. The delete repeats the "due" condition, so a row that stopped being due between
    the SELECT and the DELETE (an expired receipt claimed again, say) is kept."""
    result = PurgeResult(purger.name)
    own = purger.batch
    if own is not None and not _deletes_alone(purger.due(now).model, purger.follows):
        own = None  # something would have to follow the rows: the generic path settles it
    while max_batches is None or result.batches < max_batches:
        with transaction.atomic():
            counts = own(purger.due(now), now, batch_size) if own else None
            taken, deleted, archived = counts if counts is not None else _generic_batch(purger, now, batch_size)
        if not taken:
            break
        result.batches += 1
        result.deleted += deleted
        result.archived += archived
        if on_batch is not None:
            on_batch(deleted)
        if taken < batch_size:
            break
    return result


def _generic_batch(purger: Purger, now: datetime, batch_size: int) -> tuple[int, int, int]:
    """One batch through the ORM: (taken, deleted, archived), in the caller's transaction."""
    due = purger.due(now)
    candidates = due.order_by(purger.order_by)
    if connection.features.has_select_for_update_skip_locked:
        candidates = candidates.select_for_update(skip_locked=True)
    ids = list(candidates.values_list("pk", flat=True)[:batch_size])
    if not ids:
        return 0, 0, 0
    batch = due.filter(pk__in=ids)
    archived = purger.archive(batch, now) if purger.archive is not None else 0
    return len(ids), delete_rows(batch), archived


def purge(
    *,
    batch_size: int,
    now: datetime | None = None,
    dry_run: bool = False,
    purgers: list[Purger] | None = None,
    progress: Callable[[Purger, int], Callable[[int], None] | None] | None = None,
) -> list[PurgeResult]:
    """Run every purger. With `dry_run`, count what is due and delete nothing.

    `progress(purger, due_count)` may return a callback that receives each batch's count
    (the purge command hangs a progress bar on it).
    """
    now = now or timezone.now()
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
