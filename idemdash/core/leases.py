"""The leased-work vocabulary that receipts, webhook events and outbox messages share
(docs/architecture.md, section 8).

A unit of work is owned by one worker at a time, for a bounded time (its lease), proved
by a fencing token that changes on every claim. Every change to a unit is a compare-and-set
on the status and the token its writer last saw, so a writer that lost the unit (its
lease was taken over, or an operator acted) changes nothing. Each kind keeps its own
states and transitions in its own app and calls this module for the shared pieces.

This module imports no app of ours."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections, models, transaction
from django.db.models import QuerySet
from django.utils import timezone

log = logging.getLogger(__name__)


class StaleToken(Exception):
    """The caller no longer owns the unit: its lease was taken over, it was settled, or an
    operator acted on it. Nothing was written."""


class NotApplicable(Exception):
    """The unit's state does not allow the action (an operator's, usually)."""


def compare_and_set(queryset: QuerySet, token_field: str, token: Any, status: str, /, **changes: Any) -> bool:
    """Apply `changes` to the unit in `queryset` only if it still has `status` and the
    fencing token `token` (the ones its writer last saw). True if this writer won; False if
    another process changed the unit first, and then nothing was written. (Positional
    parameters, so that `changes` may set the status and the token.)

    One UPDATE with a rowcount check, never a read followed by a write: on PostgreSQL the
    row lock and READ COMMITTED's re-check settle a race, on SQLite the one writer does. On
    MySQL/MariaDB, see _compare_and_set_locked."""
    matching = queryset.filter(**{token_field: token, "status": status})
    if connections[queryset.db].vendor == "mysql":
        return _compare_and_set_locked(queryset, matching, changes)
    return matching.update(**changes) == 1


def _compare_and_set_locked(queryset: QuerySet, matching: QuerySet, changes: dict[str, Any]) -> bool:
    """compare_and_set on MySQL/MariaDB. InnoDB may run `UPDATE ... WHERE id = %s AND
    status = %s` through the status index, locking other units' entries as it reads them,
    and two settles of different units then deadlock (the victim's whole transaction, a
    webhook handler's included, rolled back: seen in tests/webhooks/test_receive.py's storm).
    So the unit is locked by its primary key alone, the conditions are checked under that
    lock, and the UPDATE names the primary key alone: one row locked, whatever the plan."""
    model = queryset.model
    with transaction.atomic(using=queryset.db, savepoint=False):
        candidates = list(queryset.values_list("pk", flat=True)[:2])
        locked = list(model._base_manager.using(queryset.db).select_for_update().filter(pk__in=candidates).values_list("pk", flat=True))
        won = list(matching.filter(pk__in=locked).values_list("pk", flat=True)[:2])
        return len(won) == 1 and model._base_manager.using(queryset.db).filter(pk=won[0]).update(**changes) == 1


@contextlib.contextmanager
def renewing(queryset: QuerySet, token_field: str, token: Any, status: str, lease_seconds: float) -> Iterator[None]:
    """Keep the lease of the unit in `queryset` alive while the block runs: a thread of its
    own, with its own connection, pushes `lease_expires_at` to `lease_seconds` from now every
    quarter of that, as long as the unit still has `status` and `token`. So the lease can be
    short (a dead owner's unit is taken over soon) and the work as long as it needs.

    Only for a unit whose claim has committed (the thread's connection must see it), and not
    on SQLite, where the block's write transaction would shut the thread out (callers keep a
    long lease there). A failed renewal is logged and tried again at the next beat; the
    block never waits on the thread for more than a second."""
    stop = threading.Event()
    renewals = queryset.filter(**{token_field: token, "status": status})

    def beat() -> None:
        try:
            while not stop.wait(lease_seconds / 4):
                try:
                    if not renewals.update(lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds)):
                        return  # settled, or taken over: nothing left to keep
                except DatabaseError as exc:
                    log.warning("could not renew the lease of %s %s: %s", queryset.model._meta.label, token,
                                " ".join(str(exc).split())[:200])
                    connections.close_all()  # a lost connection: the next beat opens another
        finally:
            connections.close_all()  # this thread's own

    thread = threading.Thread(target=beat, name="lease-renewal", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(1)


def stuck(model: type[models.Model], owned_status: str, now: datetime) -> QuerySet:
    """Units owned past their lease, oldest lease first. Each kind has a partial index on
    `lease_expires_at` for its owned status, which serves this."""
    return model.objects.filter(status=owned_status, lease_expires_at__lt=now).order_by("lease_expires_at", "id")


def is_stuck(unit: Any, owned_status: str, now: datetime) -> bool:
    """`stuck` for a unit already read."""
    return unit.status == owned_status and unit.lease_expires_at is not None and unit.lease_expires_at < now


class LeasedWork(models.Model):
    """What every kind of unit has alike: the end of its owner's lease (null: unowned)."""

    lease_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True


class Scheduled(models.Model):
    """A unit that waits for its time: due at `next_attempt_at` (events and messages)."""

    next_attempt_at = models.DateTimeField()

    class Meta:
        abstract = True
