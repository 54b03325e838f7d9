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
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import DatabaseError, connection, connections, models, transaction
from django.db.models import QuerySet

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


@dataclass(eq=False)
class _Kept:
    renew: Callable[[], object]
    what: str
    lease: float
    started: float
    due: float
    longest: float
    # Held while this unit is renewed; leaving `kept` takes it, so no renewal is in flight after.
    busy: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False


_lock = threading.Lock()
_kept: dict[int, _Kept] = {}
_changed = threading.Event()
_keeper: threading.Thread | None = None
_next_look = 0.0  # when the keeper looks next (time.monotonic()), under _lock
IDLE = 5.0  # how long the keeper sleeps when nothing is due (it is woken when a unit comes)


@contextlib.contextmanager
def kept(renew: Callable[[], object], lease_seconds: float, what: str, *, longest: float = math.inf) -> Iterator[None]:
    """The one lease keeper (views, in-process steps, webhook handlers, outbox sends): while
    the block runs, `renew()` is called every third of `lease_seconds`, by one daemon thread
    per process on its own connection (opened at its first renewal, so quick blocks cost a
    dict entry and no query). `renew` raises StaleToken once the unit is lost, which stops
    its renewals; another error is logged and retried a sixth of the lease later. After
    `longest` seconds the unit is presumed hung and left to lapse. Leaving the block waits
    for a renewal of it in flight, so none races the unit's settle. The claim must have
    committed; on SQLite inside a transaction (which holds the one write lock, so nothing can
    take the unit over) nothing is renewed."""
    if connection.vendor == "sqlite" and connection.in_atomic_block:
        yield
        return
    now = time.monotonic()
    unit = _Kept(renew, what, lease_seconds, now, now + lease_seconds / 3, longest)
    with _lock:
        _kept[id(unit)] = unit
        _start_keeper()
        sooner = unit.due < _next_look
    if sooner:  # the keeper sleeps until the earliest due unit, or IDLE
        _changed.set()
    try:
        yield
    finally:
        with unit.busy:
            unit.done = True
        with _lock:
            _kept.pop(id(unit), None)


def keeping() -> int:
    """How many units of this process have their leases kept now."""
    return len(_kept)


def _start_keeper() -> None:
    global _keeper
    if _keeper is None or not _keeper.is_alive():
        _keeper = threading.Thread(target=_keep_forever, name="lease-keeper", daemon=True)
        _keeper.start()


def _keep_forever() -> None:
    global _next_look
    while True:
        with _lock:
            units = list(_kept.values())
        now = time.monotonic()
        for unit in units:
            if unit.due <= now:
                _renew(unit, now)
        with _lock:
            if not _kept:
                connections.close_all()  # nothing to keep: no connection held for it
            _next_look = min([unit.due for unit in _kept.values()] + [now + IDLE])
        _changed.wait(max(0.05, _next_look - time.monotonic()))  # or until a unit is due sooner
        _changed.clear()


def _renew(unit: _Kept, now: float) -> None:
    with unit.busy:
        if unit.done:
            return
        if now - unit.started > unit.longest:
            log.warning("%s still runs after its longest lease; it is no longer renewed", unit.what)
            unit.due = math.inf
            return
        try:
            unit.renew()
            unit.due = now + unit.lease / 3
        except StaleToken:
            log.warning("the lease of %s was lost while it ran", unit.what)
            unit.due = math.inf
        except DatabaseError as exc:  # tried again soon; the lease still has two thirds to run
            log.warning("renewing the lease of %s failed: %s", unit.what, " ".join(str(exc).split())[:200])
            connections.close_all()  # a lost connection: the next renewal opens another
            unit.due = now + unit.lease / 6


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
    # The W3C `traceparent` of whoever made it (the delivery, the enqueue), when a span was
    # recording (OpenTelemetry, idemdash/core/tracing.py): every run of it, by the task made
    # with it or by a later sweep or drain, continues that trace. Empty when nothing traced it.
    traceparent = models.CharField(max_length=55, blank=True, default="", db_default="")

    class Meta:
        abstract = True
