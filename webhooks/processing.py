"""Processing of stored events: claim, complete, retry, dead letter, sweep, reprocess.

An event moves only through conditional UPDATEs with a rowcount check:
    received/retry --claim--> processing --complete--> completed | ignored
                                         --fail-----> retry (backoff) | dead
A claim writes a fresh fencing token and a lease. Completing or failing requires that token
and status `processing`, so a worker whose lease expired and was recovered by the sweeper
(or whose event was claimed again) cannot mark the event done: its handler's writes roll
back with the refused completion. Enqueueing is best-effort by design: `sweep` repairs it."""

from __future__ import annotations

import contextlib
import functools
import logging
import traceback
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from idemdash.core import audit, bulk, failures, tracing
from idemdash_client import references
from idemdash.core.leases import NotApplicable, StaleToken, compare_and_set, is_stuck, kept, stuck
from idemdash_client.retries import backoff
from webhooks.conf import setting
from webhooks.handlers import handler_for, registered
from webhooks.models import EventReference, WebhookAttempt, WebhookEndpoint, WebhookEvent

log = logging.getLogger(__name__)

Status = WebhookEvent.Status
TASK = "webhooks.tasks.process_event"
TASK_BY_KEY = "webhooks.tasks.process_event_by_key"


class LeaseLost(StaleToken):
    """The worker no longer owns the event; its handler's writes are rolled back."""


class NotReprocessable(NotApplicable):
    """A processing event (its worker holds the lease) or a held one (resume its endpoint)."""


class NotStuck(NotApplicable):
    """Only an event processing past its lease can be released."""


def enqueue(event_id: int, traceparent: str | None = None) -> bool:
    """Hand the event to django-q2. A failure (the broker down) is logged in one line, not
    raised, and the event is marked as not enqueued, so that the next sweep, seconds away,
    enqueues it again rather than waiting WEBHOOKS_REQUEUE_AFTER_SECONDS. `traceparent`: the
    trace the task continues (its enqueuer's, taken before a commit ran this)."""
    from django_q.tasks import async_task

    try:
        async_task(TASK, event_id, group="webhooks", **tracing.traceparent_kwargs(traceparent))
        return True
    except Exception as exc:  # noqa: BLE001 -- any broker's failure; the sweep repairs it
        log.warning("could not enqueue webhook event %s (%s: %s); the sweep will again", event_id,
                    type(exc).__name__, " ".join(str(exc).split())[:200])
    try:
        WebhookEvent.objects.filter(pk=event_id, status__in=WebhookEvent.CLAIMABLE).update(enqueued_at=None)
    except DatabaseError:
        pass  # then the sweep finds it after WEBHOOKS_REQUEUE_AFTER_SECONDS
    return False


def enqueue_on_commit(event_id: int) -> None:
    """Hand the event to django-q2 so that workers see it once this transaction commits.

    With the ORM broker on this database the task row is written in the transaction
    itself: one commit for the event and its task, and never one without the other. A
    failure to write it then fails the transaction, as any other failed write would.
    Another broker (Redis) is told after the commit. The task carries the current trace
    context (`traceparent`), so its span continues the request's trace."""
    traced = tracing.task_kwargs()
    if _orm_broker_in_this_database() and transaction.get_connection().in_atomic_block:
        from django_q.tasks import async_task

        async_task(TASK, event_id, group="webhooks", **traced)
    else:
        transaction.on_commit(lambda: enqueue(event_id, **traced))


class _KeptPackage:
    """Stands in for django-q2's broker: async_task builds and signs the package as always,
    and this keeps it for a statement of ours to write into the ORM broker's table."""

    def __init__(self) -> None:
        from django_q.conf import Conf

        self.list_key = Conf.CLUSTER_NAME  # the queue the ORM broker reads (get_broker's default)
        self.package: str | None = None

    def enqueue(self, package: str) -> str:
        self.package = package
        return "with its event"  # what django-q2 logs as the id it was enqueued under


def delivery_task(endpoint_id: int, dedupe_key: str, traceparent: str) -> tuple[str, str] | None:
    """The django-q2 task for a delivery's event, as the (queue, signed package) of a row of
    the ORM broker's table, for the statement that stores the delivery to write only if it
    inserts the event (webhooks/pg.py): event and task then commit together, in one
    round trip. The event has no id yet, so the task names it by its key; it continues the
    delivery's trace (`traceparent`, the one stored on the event; "" when none). None when
    another broker (or django-q2's sync mode) is configured: the caller uses enqueue_on_commit."""
    if not _orm_broker_in_this_database():
        return None
    from django_q.tasks import async_task

    kept = _KeptPackage()
    async_task(TASK_BY_KEY, endpoint_id, dedupe_key, group="webhooks", broker=kept,
               **tracing.traceparent_kwargs(traceparent))
    return kept.list_key, kept.package


def _orm_broker_in_this_database() -> bool:
    from django_q.conf import Conf

    return Conf.ORM == DEFAULT_DB_ALIAS and not Conf.SYNC


def lease_seconds() -> int:
    """The lease a claim takes. Renewed every quarter of it while the handler runs
    (`_process`), so short: WEBHOOKS_LEASE_SECONDS (20 s). On SQLite it cannot be renewed
    (one writer at a time, and the handler's transaction is that writer), so there it
    covers the task's timeout instead, as it did before leases were renewed."""
    lease = setting("WEBHOOKS_LEASE_SECONDS")
    if connection.vendor == "sqlite":
        from django_q.conf import Conf

        return max(lease, (Conf.TIMEOUT or 60) + 30)
    return lease


def claim_event(event_id: int, now: datetime | None = None) -> WebhookEvent | None:
    """Take the event if it is due; None if another worker has it or it is not due."""
    return _claim({"id": event_id}, now)


def _endpoint_paused() -> Exists:
    """The event's endpoint is paused (webhooks/endpoints.py:pause): its events are not claimed."""
    return Exists(WebhookEndpoint.objects.filter(pk=OuterRef("endpoint_id"), paused=True))


@functools.cache
def _claim_sql(match: tuple[str, ...]) -> str:
    q = connection.ops.quote_name
    table, endpoints = q(WebhookEvent._meta.db_table), q(WebhookEndpoint._meta.db_table)
    where = " AND ".join(f"{q(column)} = %s" for column in match)
    columns = ", ".join(q(f.column) for f in WebhookEvent._meta.concrete_fields)
    return (
        f"UPDATE {table} "
        "SET status = %s, attempts = attempts + 1, lease_expires_at = %s, fencing_token = %s "
        f"WHERE {where} AND status IN (%s, %s) AND next_attempt_at <= %s "
        # One primary-key probe: an event of a paused endpoint stays where it is. A delivery
        # stored just as its endpoint was paused (it read the endpoint before the pause) is
        # refused here, and held by the next sweep.
        f"AND NOT EXISTS (SELECT 1 FROM {endpoints} p WHERE p.id = {table}.endpoint_id AND p.paused = %s) "
        f"RETURNING {columns}"
    )


def _claim(match: dict[str, Any], now: datetime | None = None) -> WebhookEvent | None:
    """The conditional UPDATE and the claimed row in one statement (UPDATE ... RETURNING)
    instead of an UPDATE and a SELECT: the worker's largest share of CPU per event was the
    ORM building and running those two. `match` is columns and values that pick the event."""
    now = now or timezone.now()
    token = uuid.uuid4()
    lease = now + timedelta(seconds=lease_seconds())
    # SQLite before 3.35 has no RETURNING; MySQL none on an UPDATE (MariaDB's is INSERT's and DELETE's).
    if connection.vendor == "mysql" or not connection.features.can_return_columns_from_insert:
        events = WebhookEvent.objects.filter(**match)
        claimed = events.filter(
            ~_endpoint_paused(), status__in=WebhookEvent.CLAIMABLE, next_attempt_at__lte=now
        ).update(
            status=Status.PROCESSING, attempts=F("attempts") + 1, lease_expires_at=lease, fencing_token=token
        )
        # Our token is on the row, so this read sees our claim (nobody else can claim it now).
        return events.filter(fencing_token=token).first() if claimed == 1 else None
    field = WebhookEvent._meta.get_field

    def prep(name: str, value: Any) -> Any:
        return field(name).get_db_prep_value(value, connection)

    params = [
        Status.PROCESSING, prep("lease_expires_at", lease), prep("fencing_token", token),
        *match.values(), *WebhookEvent.CLAIMABLE, prep("next_attempt_at", now), True,
    ]
    # A raw query (not a cursor) so that the row comes back as a model with Django's
    # conversions applied (the JSON payload, and SQLite's datetimes and UUIDs).
    claimed = list(WebhookEvent.objects.raw(_claim_sql(tuple(match)), params))
    return claimed[0] if claimed else None


def _log_attempt(event: WebhookEvent, outcome: str, error: str, now: datetime) -> None:
    """The attempt the event's claim began, settled now. It began when the claim was taken,
    which is when the claim's lease started: no column or round trip of its own for that."""
    started = (
        event.lease_expires_at - timedelta(seconds=lease_seconds())
        if event.lease_expires_at else now
    )
    WebhookAttempt.objects.create(
        event_id=event.pk, number=event.attempts, outcome=outcome, error=error, started_at=started,
        finished_at=now, duration_ms=max(0, round((now - started).total_seconds() * 1000)),
    )


def _settle(
    event: WebhookEvent, outcome: str, error: str = "", references: Iterable[tuple[str, str]] = (), **changes: Any
) -> bool:
    """The conditional UPDATE that settles the claim, its attempt's row and the references
    its handler made (`event.refer`), in one transaction (the handler's, when there is one:
    no savepoint)."""
    now = timezone.now()
    with transaction.atomic(savepoint=False):
        won = compare_and_set(
            WebhookEvent.objects.filter(pk=event.pk), "fencing_token", event.fencing_token, Status.PROCESSING,
            lease_expires_at=None, fencing_token=None, **changes,
        )
        if won:
            _log_attempt(event, outcome, error, now)
            EventReference.store(event.pk, references)
    return won


def complete_event(
    event: WebhookEvent, status: str = Status.COMPLETED, references: Iterable[tuple[str, str]] = ()
) -> bool:
    """Mark a claimed event completed (or ignored). False if the claim was lost."""
    return _settle(event, status, references=references, status=status, finished_at=timezone.now(), last_error="",
                   failure_signature="")


def fail_event(
    event: WebhookEvent, error: str, *, retry_in: float | None = None, references: Iterable[tuple[str, str]] = ()
) -> str | None:
    """Schedule a retry with backoff (or after `retry_in` seconds), or after
    WEBHOOKS_MAX_ATTEMPTS a dead letter that keeps the traceback. Returns the new status, or
    None if the claim was lost."""
    now = timezone.now()
    if retry_in is None:
        retry_in = backoff(event.attempts, setting("WEBHOOKS_BACKOFF_BASE"), setting("WEBHOOKS_BACKOFF_CAP"))
    if event.attempts >= setting("WEBHOOKS_MAX_ATTEMPTS"):
        status, changes = Status.DEAD, {"finished_at": now}
    else:
        # Not enqueued: the sweeper enqueues it when it is due.
        status, changes = Status.RETRY, {"next_attempt_at": now + timedelta(seconds=retry_in), "enqueued_at": None}
    # Counted in its group (idemdash/core/failures.py) in the settle's transaction, if it wins.
    slug = WebhookEndpoint.objects.filter(pk=event.endpoint_id).values_list("slug", flat=True).first()
    failure = failures.Failure("event", f"{slug} {event.event_type}", error)
    with transaction.atomic(savepoint=False):
        won = _settle(event, status, error, references, status=status, last_error=error,
                      failure_signature=failure.signature, **changes)
        if won:
            failures.record(failure, event.pk, now)
    return status if won else None


PROCESS_SPAN = "idemdash.webhook.process"


def process_event(event_id: int, traceparent: str | None = None) -> str:
    """Claim, run the handler, settle. Returns what happened, for the task result. Its span
    continues the trace of whoever enqueued it (`traceparent`: the delivery's request)."""
    with tracing.task(PROCESS_SPAN, traceparent) as span:
        return _traced(span, _process(claim_event(event_id)), event_id=event_id)


def process_event_by_key(endpoint_id: int, dedupe_key: str, traceparent: str | None = None) -> str:
    """process_event for the task a delivery writes with its event (delivery_task)."""
    with tracing.task(PROCESS_SPAN, traceparent) as span:
        event = _claim({"endpoint_id": endpoint_id, "dedupe_key": dedupe_key})
        return _traced(span, _process(event), event_id=event.pk if event else None)


def _traced(span: Any, status: str, *, event_id: int | None) -> str:
    if span.is_recording():
        span.set_attributes({"idemdash.webhook.outcome": status,
                             **({"idemdash.webhook.event_id": event_id} if event_id is not None else {})})
    return status


def _process(event: WebhookEvent | None) -> str:
    if event is None:
        return "not_claimed"
    if (span := tracing.current()).is_recording():
        span.set_attributes({"idemdash.webhook.provider": event.provider, "idemdash.webhook.event_type": event.event_type,
                             "idemdash.webhook.attempt": event.attempts})
    handler = handler_for(event.provider, event.event_type)
    claimed_on = connection.connection  # the connection the claim ran on, to tell if it was lost
    # The handler's cause: what an outbox message it enqueues records, where `event.refer` puts references.
    running = references.Cause(references.WEBHOOK_EVENT, event.pk)
    try:
        with _renewing(event), transaction.atomic():
            if handler is not None:
                with references.causing(running):
                    handler(event)
            if not complete_event(event, Status.COMPLETED if handler else Status.IGNORED, running.references):
                raise LeaseLost(f"webhook event {event.pk} was taken over")
    except LeaseLost:
        log.warning("webhook event %s: lease lost, handler's writes rolled back", event.pk)
        _log_attempt(event, WebhookAttempt.Outcome.LEASE_LOST, "the handler finished after the claim was lost; "
                     "its writes were rolled back", timezone.now())
        return "lease_lost"
    except Exception as exc:
        error = traceback.format_exc()
        if isinstance(exc, DatabaseError) and _connection_lost(claimed_on):
            return _retry_after_lost_connection(event, error)
        status = fail_event(event, error, references=running.references)
        log.warning("webhook event %s failed on attempt %s -> %s", event.pk, event.attempts, status)
        if status is None:
            _log_attempt(event, WebhookAttempt.Outcome.LEASE_LOST, error, timezone.now())
        return status or "lease_lost"
    return Status.COMPLETED if handler else Status.IGNORED


def _connection_lost(claimed_on: Any) -> bool:
    """Whether the worker's database connection was lost (a restart, a failover, a terminated
    backend), as opposed to the handler's own query failing on a live one. Django drops a
    connection whose rollback failed (and opens another at the next query), so a lost one is
    no longer the connection the claim ran on; one that is still there but broken is closed."""
    if connection.in_atomic_block:  # inside a caller's transaction: not ours to judge
        return False
    if connection.connection is not claimed_on:
        return True
    if connection.is_usable():
        return False
    connection.close()
    return True


def _retry_after_lost_connection(event: WebhookEvent, error: str) -> str:
    """The database, not the handler, failed: the event goes back due now on a new
    connection, for the next sweep (seconds away) rather than after its lease and a backoff.
    If the database is still away, the lease runs out and the sweep takes it over then."""
    try:
        status = fail_event(event, error, retry_in=0)
    except DatabaseError:
        log.warning("webhook event %s: the database is away; the event waits for its lease to run out", event.pk)
        return "database_away"
    log.warning("webhook event %s: lost the database connection on attempt %s -> %s, due now",
                event.pk, event.attempts, status)
    return status or "lease_lost"


def _renewing(event: WebhookEvent) -> Any:
    """The lease kept while the handler runs (idemdash/core/leases.py:kept), where it can be:
    not on SQLite (the handler's transaction holds the one write lock, so nothing can take the
    event over), and not when the claim has not committed (called inside a transaction, as
    some tests do)."""
    if connection.vendor == "sqlite" or connection.in_atomic_block:
        return contextlib.nullcontext()
    rows = WebhookEvent.objects.filter(pk=event.pk, fencing_token=event.fencing_token, status=Status.PROCESSING)

    def renewal() -> None:
        if not rows.update(lease_expires_at=timezone.now() + timedelta(seconds=lease_seconds())):
            raise StaleToken(f"webhook event {event.pk} was settled or taken over")
    return kept(renewal, lease_seconds(), f"webhook event {event.pk}")


@dataclass
class SweepResult:
    stuck_recovered: int = 0
    stuck_dead: int = 0
    released_held: int = 0
    held: int = 0
    enqueued: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


LEASE_LOST = "lease expired: the worker died or exceeded its timeout"


def _recovery(now: datetime, *, out_of_attempts: bool, error: str = LEASE_LOST) -> dict[str, Any]:
    """The changes that take a stuck event (processing past its lease) back: to retry, due
    now, or dead when it has used its attempts. Shared by the sweeper and the operator."""
    changes: dict[str, Any] = {
        "lease_expires_at": None,
        "fencing_token": None,
        "stuck_recoveries": F("stuck_recoveries") + 1,
        "last_error": error,
    }
    if out_of_attempts:
        return {**changes, "status": Status.DEAD, "finished_at": now}
    return {**changes, "status": Status.RETRY, "next_attempt_at": now, "enqueued_at": None}


def sweep(now: datetime | None = None, *, batch: int = 500) -> SweepResult:
    """Repair what a lost worker or a lost message left behind. Safe to run concurrently.

    A lost enqueue, a lost broker message or a dead worker is repaired here: every worker
    cluster runs this every few seconds (its tick, idemdash/worker/liveness.py) besides the
    every-minute schedule, and it enqueues every due event that nobody has picked up. A
    duplicate enqueue is harmless because the claim admits one worker. The lease is short and
    renewed while the handler runs (`_process`), so the event of a dead worker is taken over
    within seconds."""
    now = now or timezone.now()
    result = SweepResult()
    stuck_events = stuck(WebhookEvent, Status.PROCESSING, now)
    result.stuck_dead = stuck_events.filter(attempts__gte=setting("WEBHOOKS_MAX_ATTEMPTS")).update(
        **_recovery(now, out_of_attempts=True)
    )
    result.stuck_recovered = stuck_events.filter(attempts__lt=setting("WEBHOOKS_MAX_ATTEMPTS")).update(
        **_recovery(now, out_of_attempts=False)
    )
    # A delivery stored as received just as its endpoint was paused is held here (its claim
    # refuses it meanwhile), and one stored as held just as its endpoint was resumed is released.
    result.held = WebhookEvent.objects.filter(_endpoint_paused(), status__in=WebhookEvent.CLAIMABLE).update(
        status=Status.HELD, enqueued_at=None
    )
    result.released_held = WebhookEvent.objects.filter(status=Status.HELD, endpoint__paused=False).update(
        status=Status.RECEIVED, next_attempt_at=now, enqueued_at=None
    )
    not_queued = Q(enqueued_at=None) | Q(
        enqueued_at__lt=now - timedelta(seconds=setting("WEBHOOKS_REQUEUE_AFTER_SECONDS"))
    )
    if _broker_is_empty():
        # No task waits in the broker, so a due event enqueued a while ago that nobody has
        # claimed lost its task: pulled by a cluster that died before running it (the ORM
        # broker hands it out again only after Q_CLUSTER's `retry`, 120 s), or lost with
        # Redis. While tasks wait, events wait their turn behind them and are not doubled.
        not_queued |= Q(enqueued_at__lt=now - timedelta(seconds=setting("WEBHOOKS_REQUEUE_IDLE_SECONDS")))
    due = WebhookEvent.objects.filter(status__in=WebhookEvent.CLAIMABLE, next_attempt_at__lte=now).filter(
        not_queued
    )
    for event_id, traceparent in list(due.order_by("next_attempt_at").values_list("pk", "traceparent")[:batch]):
        # Marked before enqueueing, conditionally, so two sweepers do not both enqueue it. The
        # task continues the delivery's trace, not the sweep's.
        if due.filter(pk=event_id).update(enqueued_at=now) == 1:
            if not enqueue(event_id, traceparent):
                break  # the broker is down: the next sweep, seconds away, tries again
            result.enqueued += 1
    if any(asdict(result).values()):
        log.info("webhook sweep: %s", result.as_dict())
    return result


def _broker_is_empty() -> bool:
    """Whether no task waits in django-q2's broker (False when it cannot be asked)."""
    from django_q.brokers import get_broker

    try:
        return get_broker().queue_size() == 0
    except Exception:  # noqa: BLE001 -- the broker is down: then do as if tasks waited
        return False


def reprocess(event: WebhookEvent, *, actor: str, user: Any = None, reason: str = "") -> WebhookEvent:
    """Run a finished (or waiting) event again, by hand, recorded in the audit log.

    The attempt budget starts afresh. A processing event is refused (its worker still holds
    the lease), and so is a held one (resume its endpoint instead).
    """
    before = event.status
    if before in (Status.PROCESSING, Status.HELD):
        raise NotReprocessable(f"A {before} event cannot be reprocessed.")
    now = timezone.now()
    with transaction.atomic():
        # Unowned in every status it applies to, so the token it is guarded by is None.
        won = compare_and_set(
            WebhookEvent.objects.filter(pk=event.pk), "fencing_token", event.fencing_token, before,
            status=Status.RECEIVED,
            attempts=0,
            next_attempt_at=now,
            enqueued_at=now,
            finished_at=None,
            lease_expires_at=None,
            fencing_token=None,
        )
        if not won:
            raise NotReprocessable("The event changed before it could be reprocessed; reload it.")
        audit.record(actor, "webhook_event.reprocess", event, before, Status.RECEIVED, reason, user=user)
        enqueue_on_commit(event.pk)
    event.refresh_from_db()
    return event


def release(event: WebhookEvent, *, actor: str, user: Any = None, reason: str = "") -> WebhookEvent:
    """What the sweeper does for one stuck event, now, by an operator, recorded in the audit
    log: back to retry (due now), or dead when out of attempts.

    Guarded by the fencing token the operator saw and by the lease having run out, so a
    worker that is still inside its lease, or that re-claimed the event meanwhile, is never
    cut off. The worker that lost the event can no longer complete it (its token is gone).
    """
    now = timezone.now()
    if not is_stuck(event, Status.PROCESSING, now):
        raise NotStuck("Only an event processing past its lease can be released.")
    out_of_attempts = event.attempts >= setting("WEBHOOKS_MAX_ATTEMPTS")
    recovery = _recovery(now, out_of_attempts=out_of_attempts, error="released by an operator: " + LEASE_LOST)
    with transaction.atomic():
        won = compare_and_set(
            WebhookEvent.objects.filter(pk=event.pk, lease_expires_at__lt=now), "fencing_token", event.fencing_token,
            Status.PROCESSING, **recovery,
        )
        if not won:
            raise NotStuck("The event changed before it could be released; reload it.")
        after = Status.DEAD if out_of_attempts else Status.RETRY
        _log_attempt(event, WebhookAttempt.Outcome.RELEASED, "released by an operator: " + LEASE_LOST, now)
        audit.record(actor, "webhook_event.release", event, Status.PROCESSING, after, reason, user=user)
        if not out_of_attempts:
            WebhookEvent.objects.filter(pk=event.pk, status=Status.RETRY).update(enqueued_at=now)
            enqueue_on_commit(event.pk)
    event.refresh_from_db()
    return event


def lasting_failure(event: WebhookEvent) -> str:
    """Why running the event again would end as it did ("" when it may not): no handler is
    registered for its type, so reprocessing only marks it ignored again. (A handler's own
    errors carry no "permanent" mark: whether it fails again is the handler's business.)
    `lasting_failures` is the same question asked in SQL."""
    if handler_for(event.provider, event.event_type) is None:
        return (f"No handler is registered for {event.provider} {event.event_type or '(no type)'}: reprocessing "
                "runs nothing and marks it ignored again. Deploy a handler first.")
    return ""


def lasting_failures() -> Q:
    handled = Q(pk__in=[])
    for provider, event_type in registered():
        handled |= Q(provider=provider) if event_type == "*" else Q(provider=provider, event_type=event_type)
    return ~handled


# Each dead event reprocessed through `reprocess`: one compare-and-set and one audit entry per
# row; a row that changed meanwhile is skipped.
reprocess_many = bulk.many(reprocess, Q(status=Status.DEAD), refused=(NotReprocessable,))
