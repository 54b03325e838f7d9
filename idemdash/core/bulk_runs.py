"""Bulk runs: a dashboard bulk action in the background, with progress and cancel.

`start` writes the run and one `BulkItem` per matched row in one transaction and hands the
run to the worker (django-q2), whose task `advance`s it a chunk at a time. Each item is taken
(a conditional UPDATE from pending) and acted on in one transaction, so a worker killed
mid-run leaves every item either done with its effect or pending without it:
`resume_stalled` (every minute) hands a run whose worker went quiet to another, and no item
is done twice or lost. `progress` is read from the items and the rows they acted on, never
from counters that could drift. The action's synchronous bulk form is idemdash/core/bulk.py."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from idemdash.core import actions, audit
from idemdash.core.bulk import BULK_LIMIT

log = logging.getLogger(__name__)

# Items one task takes at a time, between looks at whether the run was cancelled, and how
# long one task goes on before it hands the rest to a fresh task (under django-q2's timeout).
CHUNK = 100
CHUNK_SECONDS = 20.0
# A run not touched for this long has lost its worker (a task touches it after every chunk
# and never runs past django-q2's 60 s timeout): resume_stalled hands it to another.
STALLED_AFTER = timedelta(seconds=90)
TASK = "receipts.tasks.advance_bulk_run"


class BulkRun(models.Model):
    """One bulk action of an operator: the rows it was started on (its items), who started
    it and why, and whether the worker is still at it."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"  # every item acted on (or refused)
        CANCELLED = "cancelled"  # items not yet taken stay pending, untouched

    ACTIVE = (Status.QUEUED, Status.RUNNING)

    created_at = models.DateTimeField(db_index=True)
    # Touched after every chunk: how resume_stalled tells a run whose worker died.
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    kind = models.CharField(max_length=32)  # the registry's kind (idemdash/core/actions.py)
    title = models.CharField(max_length=255)  # "Send again 26 dead messages"
    filters = models.TextField(blank=True)  # the filter it was started with, in the form's words
    actor = models.CharField(max_length=255)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reason = models.CharField(max_length=500, blank=True)
    total = models.PositiveIntegerField(default=0)
    cancelled_by = models.CharField(max_length=255, blank=True)

    class Meta:
        indexes = [models.Index(fields=["status", "updated_at"], name="bulk_run_active")]

    def __str__(self) -> str:
        return self.title

    @property
    def active(self) -> bool:
        return self.status in self.ACTIVE


class BulkItem(models.Model):
    """One row of a bulk run, named as the operator knows it when the run started."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DONE = "done"  # the action ran: its own audit entry says what it changed
        REFUSED = "refused"  # changed since the run started (or the action failed): detail says why

    run = models.ForeignKey(BulkRun, on_delete=models.CASCADE, related_name="items")
    object_id = models.BigIntegerField()
    name = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    detail = models.CharField(max_length=500, blank=True)
    acted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "object_id"], name="bulk_item_once")]
        indexes = [models.Index(fields=["run", "status"], name="bulk_item_status")]




def start(kind_name: str, rows: QuerySet, *, actor: str, user: Any = None, reason: str = "", filters: str = "",
          limit: int = BULK_LIMIT) -> BulkRun:
    """Write a run of kind `kind_name`'s bulk action over the first `limit` of `rows` it applies
    to, and its audit entry, and hand it to the worker once committed."""

    kind = actions.kind(kind_name)
    spec = kind.bulk
    now = timezone.now()
    with transaction.atomic():
        run = BulkRun.objects.create(
            created_at=now, updated_at=now, kind=kind_name, title="", filters=filters[:5000], actor=actor,
            user=user if getattr(user, "pk", None) else None, reason=audit.cut(reason),
        )
        items = [
            BulkItem(run=run, object_id=row.pk, name=kind.row_key(row)[:255])
            for row in rows.filter(spec.run_many.where).order_by("id")[:limit].iterator(chunk_size=500)
        ]
        BulkItem.objects.bulk_create(items, batch_size=500)
        run.total = len(items)
        run.title = f"{spec.verb} {run.total} {spec.noun}{'' if run.total == 1 else 's'}"
        run.save(update_fields=["total", "title"])
        audit.record(actor, "bulk_run.start", run, "", BulkRun.Status.QUEUED, reason, user=user)
        transaction.on_commit(lambda: enqueue(run.pk))
    return run


def enqueue(run_id: int) -> bool:
    """Hand the run to django-q2. A broker that is down is logged, not raised: the run stays
    active and resume_stalled enqueues it again."""
    from django_q.tasks import async_task

    try:
        async_task(TASK, run_id, group="bulk")
        return True
    except Exception as exc:  # noqa: BLE001 -- any broker's failure; resume_stalled repairs it
        log.warning("could not enqueue bulk run %s (%s); it is resumed within %s", run_id, type(exc).__name__,
                    STALLED_AFTER)
        return False


def advance(run_id: int, *, seconds: float = CHUNK_SECONDS) -> int:
    """The worker's part: act on the run's pending items in id order, a chunk at a time, for
    about `seconds`; then hand the rest to a fresh task, or mark the run finished. Returns
    how many items this call acted on. Two calls on one run at once (a resumed run whose
    worker was only slow) share the items between them: each item is taken once."""

    run = BulkRun.objects.select_related("user").get(pk=run_id)
    kind = actions.kind(run.kind)
    BulkRun.objects.filter(pk=run_id, status=BulkRun.Status.QUEUED).update(status=BulkRun.Status.RUNNING)
    began = time.monotonic()
    acted = 0
    while time.monotonic() - began < seconds:
        chunk = list(run.items.filter(status=BulkItem.Status.PENDING).order_by("id").values_list("id", "object_id")[:CHUNK])
        if not chunk:
            break
        for item_id, object_id in chunk:
            # Read before each item: a cancellation stops the run at the next item.
            if not BulkRun.objects.filter(pk=run_id, status__in=BulkRun.ACTIVE).exists():
                return acted
            acted += _act(run, kind, item_id, object_id)
        BulkRun.objects.filter(pk=run_id, status__in=BulkRun.ACTIVE).update(updated_at=timezone.now())
    now = timezone.now()
    finished = BulkRun.objects.filter(pk=run_id, status=BulkRun.Status.RUNNING).exclude(
        pk__in=BulkItem.objects.filter(run_id=run_id, status=BulkItem.Status.PENDING).values("run_id")
    ).update(status=BulkRun.Status.FINISHED, finished_at=now, updated_at=now)
    if not finished and BulkRun.objects.filter(pk=run_id, status=BulkRun.Status.RUNNING).exists():
        enqueue(run_id)
    return acted


def _act(run: BulkRun, kind: Any, item_id: int, object_id: int) -> int:
    spec = kind.bulk
    with transaction.atomic():
        # Taken and acted on in one transaction: a worker killed in between leaves the item
        # pending and its row untouched, and a second worker cannot take it again.
        if not BulkItem.objects.filter(pk=item_id, status=BulkItem.Status.PENDING).update(
            status=BulkItem.Status.DONE, acted_at=timezone.now()
        ):
            return 0
        row = kind.units().filter(spec.run_many.where, pk=object_id).first()
        if row is None:
            why = f"no longer a {spec.noun} when its turn came"
        else:
            try:
                with transaction.atomic(), audit.in_run(run):
                    spec.action.perform(row, actor=run.actor, user=run.user, reason=run.reason)
                return 1
            except spec.action.refused as exc:
                why = str(exc)
            except Exception as exc:  # noqa: BLE001 -- one row's failure must not stall the run forever
                log.exception("bulk run %s: %s on %s %s failed", run.pk, spec.action.name, kind.name, object_id)
                why = f"failed: {type(exc).__name__}: {exc}"
        BulkItem.objects.filter(pk=item_id).update(status=BulkItem.Status.REFUSED, detail=why[:500])
    return 0


def resume_stalled(now: datetime | None = None) -> list[int]:
    """Hand every active run that no worker touched for STALLED_AFTER to the worker again."""
    now = now or timezone.now()
    stalled = Q(status__in=BulkRun.ACTIVE, updated_at__lt=now - STALLED_AFTER)
    resumed = []
    for pk in BulkRun.objects.filter(stalled).values_list("pk", flat=True):
        # Conditional, so that two sweeps at once enqueue it once.
        if BulkRun.objects.filter(stalled, pk=pk).update(updated_at=now):
            enqueue(pk)
            resumed.append(pk)
    return resumed


def cancel(run: BulkRun, *, actor: str, user: Any = None) -> bool:
    """Stop the run at its next item, recorded in the audit log; False (and nothing recorded)
    when it was no longer active. Items already taken finish."""
    now = timezone.now()
    before = run.status
    with transaction.atomic():
        if BulkRun.objects.filter(pk=run.pk, status__in=BulkRun.ACTIVE).update(
            status=BulkRun.Status.CANCELLED, cancelled_by=actor, finished_at=now, updated_at=now
        ) != 1:
            return False
        audit.record(actor, "bulk_run.cancel", run, before, BulkRun.Status.CANCELLED, user=user)
    run.refresh_from_db()
    return True


@dataclass(frozen=True)
class Progress:
    """Where a run is, read from its items and the rows they acted on: `done` items had the
    action (requeued, released), `outcomes` are those rows' current statuses, and `waiting`
    is how many of them have not reached one of the statuses that settle them."""

    total: int
    pending: int
    done: int
    refused: int
    outcomes: list[tuple[str, int]]
    settled: int
    active: bool

    @property
    def waiting(self) -> int:
        return self.done - self.settled

    @property
    def untouched(self) -> int:
        """Items a cancelled run never took."""
        return 0 if self.active else self.pending

    @property
    def over(self) -> bool:
        """Nothing left to change: the run stopped and every row it acted on settled."""
        return not self.active and self.waiting == 0


def progress(run: BulkRun) -> Progress:

    kind = actions.kind(run.kind)
    by_status = dict(run.items.values_list("status").annotate(n=Count("*")).order_by())
    done = by_status.get(BulkItem.Status.DONE, 0)
    outcomes: list[tuple[str, int]] = []
    settled = done
    if kind.bulk.settles and done:
        acted_on = run.items.filter(status=BulkItem.Status.DONE).values("object_id")
        counts = dict(
            kind.model._default_manager.filter(pk__in=acted_on).values_list("status").annotate(n=Count("*")).order_by()
        )
        settles = kind.bulk.settles
        # Settled outcomes first, in the action's own order ("sent", then "dead").
        outcomes = [(s, counts[s]) for s in settles if counts.get(s)] + sorted(
            (s, n) for s, n in counts.items() if s not in settles
        )
        settled = sum(n for s, n in counts.items() if s in settles)
        # A row purged meanwhile has no status to wait for.
        settled += done - sum(counts.values())
    return Progress(
        total=run.total, pending=by_status.get(BulkItem.Status.PENDING, 0), done=done,
        refused=by_status.get(BulkItem.Status.REFUSED, 0), outcomes=outcomes, settled=settled, active=run.active,
    )
