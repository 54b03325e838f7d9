"""The outbox state machine: enqueue, claim, and settle (sent, retry, dead), the drainer's
hand-back, and the operator actions (send now, send again, release).

Like receipts/store.py, every transition is a conditional UPDATE with a rowcount check.
A claim bumps the message's fencing token; settling requires the token the drainer claimed
with, so a drainer whose lease ran out (and whose message another drainer re-claimed)
cannot write its result over the newer one. Actions run outside any transaction."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import IntegrityError, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from idemdash.core import audit, bulk, failures, tracing
from idemdash.core.attempts import RETRYABLE_4XX, lasting_status, lasting_status_q, record_stale
from idemdash.core.canonical import fingerprint_json
from idemdash.core.leases import NotApplicable, StaleToken, compare_and_set, is_stuck, kept
from idemdash_client.references import cause, validate_all
from idemdash_client.retries import backoff
from receipts.outbox import pauses
from receipts.outbox.actions import ACTION_RE, get_action, registered
from receipts.outbox.conf import RETRY_AFTER_MAX_SECONDS, setting
from receipts.outbox.models import MessageReference, OutboxAttempt, OutboxMessage
from receipts.keys import validate_key

log = logging.getLogger(__name__)

Status = OutboxMessage.Status
Outcome = OutboxAttempt.Outcome

SEND_TASK = "receipts.outbox.tasks.send"


class KeyReused(ValueError):
    """The key names a message with another action or payload."""


class StaleClaim(StaleToken):
    """The drainer no longer owns the message: its lease ran out and it was re-claimed."""


class InvalidTransition(NotApplicable):
    """An operator action does not apply to the message's current state."""


@dataclass
class Enqueued:
    message: OutboxMessage
    created: bool


def enqueue(
    action: str, payload: Any, key: str, *, scope: str = "", references: Iterable[object] = ()
) -> Enqueued:
    """Add a message in the caller's transaction (if any); send_soon once it commits.

    A message enqueued while a receipt's attempt or a webhook handler runs records it as its
    cause. Repeating the same key, action and payload returns the existing message
    (`created=False`); the same key with another message raises KeyReused. An unknown
    action, a payload its validator refuses or an invalid reference raises ValueError before
    anything is written."""
    validate_key(key)
    if not isinstance(action, str) or not ACTION_RE.fullmatch(action):
        raise ValueError("An action is 1 to 100 characters of letters, digits and . _ : -")
    performer = get_action(action)
    performer.validate(payload)
    referred = validate_all(references)
    running = cause()
    fingerprint = fingerprint_json({"action": action, "payload": payload})
    now = timezone.now()
    # The enqueuer's trace context, taken now: the send task's span continues it, and so
    # does a send by a scheduled drain, which has only the row (drain.perform).
    traced = tracing.task_kwargs()
    try:
        # A savepoint inside the caller's transaction: a duplicate key rolls back only
        # this insert, never the caller's own writes.
        with transaction.atomic():
            message = OutboxMessage.objects.create(
                scope=scope,
                key=key,
                action=action,
                destination_host=performer.destination_host(payload),
                payload=payload,
                fingerprint=fingerprint,
                status=Status.PENDING,
                next_attempt_at=now,
                created_at=now,
                updated_at=now,
                cause_kind=running.kind if running else "",
                cause_id=running.id if running else None,
                traceparent=traced.get("traceparent", ""),
            )
            MessageReference.store(message.pk, referred)
            # Registered inside the savepoint, so a message that is rolled back sends nothing.
            transaction.on_commit(lambda: send_soon(message.pk, **traced))
        return Enqueued(message, created=True)
    except IntegrityError:
        pass
    message = OutboxMessage.objects.get(scope=scope, key=key)
    if message.fingerprint != fingerprint:
        raise KeyReused(f"The key {key!r} was used for another message.")
    return Enqueued(message, created=False)


def send_soon(message_id: int, traceparent: str | None = None) -> None:
    """Ask the worker to send this message now (tasks.send). Failures are logged, not
    raised: a message that no task sends is sent by the scheduled drain within a minute,
    and one that two drainers see is claimed by one of them."""
    # Without django-q2 among the apps (the core install, or a project that has the package
    # but not the app), there is no worker to ask: drain_outbox or the host's own worker sends.
    if not apps.is_installed("django_q"):
        return
    from django_q.tasks import async_task

    try:
        async_task(SEND_TASK, message_id, group="outbox", **tracing.traceparent_kwargs(traceparent))
    except Exception:
        log.warning("could not ask the worker to send outbox message %s; the scheduled drain will", message_id,
                    exc_info=True)


def _due(now: datetime, max_attempts: int) -> Q:
    return Q(status__in=[Status.PENDING, Status.RETRY], next_attempt_at__lte=now) | Q(
        status=Status.IN_FLIGHT, lease_expires_at__lte=now, attempts__lt=max_attempts
    )


def claim_batch(
    drainer: str, *, batch_size: int | None = None, lease_seconds: float | None = None, ids: list[int] | None = None
) -> list[OutboxMessage]:
    """Claim up to `batch_size` due messages (pending, due retries, and in-flight ones whose
    lease ran out; only among `ids` when given) for `drainer`: each in flight with a fresh
    lease, a new fencing token and its attempt counted.

    Only actions registered in this process are claimed, so drainers with different
    registries (a host's worker beside ours, old code beside new in a deployment) leave each
    other's messages alone; paused actions and hosts are left out by the lock and again by
    the UPDATE. One short transaction: SKIP LOCKED gives concurrent PostgreSQL drainers
    disjoint batches; on SQLite the IMMEDIATE transaction serialises them."""
    batch_size = batch_size or setting("OUTBOX_BATCH_SIZE")
    lease = timedelta(seconds=lease_seconds or setting("OUTBOX_LEASE_SECONDS"))
    max_attempts = setting("OUTBOX_MAX_ATTEMPTS")
    now = timezone.now()
    messages = OutboxMessage.objects.filter(pauses.claimable(), action__in=registered())
    if ids is not None:
        messages = messages.filter(id__in=ids)
    with transaction.atomic():
        # A message whose drainers kept dying while holding it (a poison message that
        # crashes the process, say) is not claimed forever: it dies at the attempt limit.
        # Rows are locked (skipping those another drainer holds) before the UPDATE, so two
        # drainers never lock the same rows in different orders and deadlock.
        exhausted = Q(status=Status.IN_FLIGHT, lease_expires_at__lte=now, attempts__gte=max_attempts)
        exhausted_ids = _lock_ids(messages.filter(exhausted), batch_size)
        if exhausted_ids:
            error = "The drainer's lease ran out on the last allowed attempt."
            OutboxMessage.objects.filter(exhausted, id__in=exhausted_ids).update(
                status=Status.DEAD, lease_expires_at=None, last_error=error, updated_at=now
            )
            # Logged like any other ending, so that counts of dead messages drawn from
            # the attempt log include these.
            OutboxAttempt.objects.bulk_create(
                OutboxAttempt(**OutboxAttempt.copied_from(m), outcome=Outcome.DEAD, error=error, drainer=m.claimed_by,
                              created_at=now)
                for m in OutboxMessage.objects.filter(id__in=exhausted_ids, status=Status.DEAD)
            )
        due_ids = _lock_ids(messages.filter(_due(now, max_attempts)), batch_size)
        if not due_ids:
            return []
        # The due condition is repeated in the UPDATE so that the claim stays a
        # compare-and-set even where the SELECT took no lock.
        OutboxMessage.objects.filter(_due(now, max_attempts), pauses.claimable(), id__in=due_ids).update(
            status=Status.IN_FLIGHT, fencing_token=F("fencing_token") + 1, attempts=F("attempts") + 1,
            lease_expires_at=now + lease, claimed_by=drainer, updated_at=now,
        )
        return list(
            OutboxMessage.objects.filter(
                id__in=due_ids, status=Status.IN_FLIGHT, claimed_by=drainer, lease_expires_at=now + lease
            ).order_by("next_attempt_at", "id")
        )


def _lock_ids(queryset: QuerySet, limit: int) -> list[int]:
    """Ids of up to `limit` rows, oldest due first, locked for this transaction on
    PostgreSQL (rows other transactions hold are skipped). On SQLite select_for_update is
    a no-op and the IMMEDIATE transaction already excludes every other writer."""
    locked = queryset.select_for_update(skip_locked=True).order_by("next_attempt_at", "id")
    return list(locked.values_list("id", flat=True)[:limit])


def renew_lease(message: OutboxMessage, *, lease_seconds: float | None = None) -> bool:
    """Extend the lease (just before performing the message, the fence of its send, and then
    by `sending`); False if it was lost."""
    lease = timedelta(seconds=lease_seconds or setting("OUTBOX_LEASE_SECONDS"))
    now = timezone.now()
    won = compare_and_set(
        OutboxMessage.objects.filter(pk=message.pk), "fencing_token", message.fencing_token, Status.IN_FLIGHT,
        lease_expires_at=now + lease, updated_at=now,
    )
    if won:
        message.lease_expires_at = now + lease
    return won


def sending(message: OutboxMessage, lease_seconds: float) -> contextlib.AbstractContextManager[None]:
    """The message's lease kept while its action performs it, by the one lease keeper
    (idemdash/core/leases.py:kept)."""
    def renewal() -> None:
        if not renew_lease(message, lease_seconds=lease_seconds):
            raise StaleClaim(f"outbox message {message.key} was re-claimed")
    return kept(renewal, lease_seconds, f"outbox message {message.key}")


def _backoff(attempts: int, retry_after: float | None = None) -> float:
    """The core's backoff with this app's settings, never shorter than what the server
    asked for (Retry-After, capped at RETRY_AFTER_MAX_SECONDS)."""
    base, cap = float(setting("OUTBOX_BACKOFF_BASE_SECONDS")), float(setting("OUTBOX_BACKOFF_CAP_SECONDS"))
    return backoff(attempts, base, cap, retry_after=retry_after, retry_after_max=RETRY_AFTER_MAX_SECONDS)


def _settle(message: OutboxMessage, outcome: str, *, status_code: int | None, error: str, duration_ms: int | None,
            drainer: str, failure: failures.Failure | None = None, **changes: Any) -> None:
    now = timezone.now()
    with transaction.atomic():
        won = compare_and_set(
            OutboxMessage.objects.filter(pk=message.pk), "fencing_token", message.fencing_token, Status.IN_FLIGHT,
            lease_expires_at=None, last_status_code=status_code, last_error=error, updated_at=now, **changes,
        )
        line = {**OutboxAttempt.copied_from(message), "status_code": status_code, "error": error[:2000],
                "duration_ms": duration_ms, "drainer": drainer, "created_at": now}
        if won:
            OutboxAttempt.objects.create(outcome=outcome, **line)
            if failure is not None:
                failures.record(failure, message.pk, now)
        else:
            record_stale(OutboxAttempt, **line)
    if not won:
        raise StaleClaim(f"fencing token {message.fencing_token} no longer owns outbox message {message.key!r}")
    for name, value in changes.items():
        setattr(message, name, value)


def mark_sent(
    message: OutboxMessage, *, status_code: int | None = None, duration_ms: int | None = None, drainer: str = ""
) -> None:
    _settle(message, Outcome.SENT, status_code=status_code, error="", duration_ms=duration_ms, drainer=drainer,
            status=Status.SENT, sent_at=timezone.now(), failure_signature="")


def mark_failed(message: OutboxMessage, error: str, *, permanent: bool = False, retry_after: float | None = None,
                status_code: int | None = None, duration_ms: int | None = None, drainer: str = "") -> str:
    """Schedule a retry with backoff, or mark the message dead when the error is permanent
    or this was the last allowed attempt. Returns the new status."""
    if permanent or message.attempts >= setting("OUTBOX_MAX_ATTEMPTS"):
        outcome, changes = Outcome.DEAD, {"status": Status.DEAD}
    else:
        due = timezone.now() + timedelta(seconds=_backoff(message.attempts, retry_after))
        outcome, changes = Outcome.RETRY, {"status": Status.RETRY, "next_attempt_at": due}
    # Counted in its group (idemdash/core/failures.py) in the settle's transaction.
    failure = failures.Failure("message", " ".join(filter(None, [message.action, message.destination_host])), error)
    _settle(message, outcome, status_code=status_code, error=error, duration_ms=duration_ms, drainer=drainer,
            failure=failure, failure_signature=failure.signature, **changes)
    return changes["status"]


def hand_back(message: OutboxMessage) -> bool:
    """Hand back a claimed message that was not performed (the drain ran out of time, or its
    worker is stopping): due at once, and the claim does not count as an attempt. The
    drainer's own, not an operator action, so not audited (an operator's is `release`)."""
    now = timezone.now()
    return compare_and_set(
        OutboxMessage.objects.filter(pk=message.pk), "fencing_token", message.fencing_token, Status.IN_FLIGHT,
        status=Status.PENDING if message.attempts <= 1 else Status.RETRY,
        attempts=F("attempts") - 1,
        lease_expires_at=None,
        next_attempt_at=now,
        updated_at=now,
    )


@dataclass(frozen=True)
class Repair:
    """An operator's repair of one message: the statuses it applies to and what it changes
    besides making the message due now; `action` is its audit entry's name."""

    action: str
    allowed: tuple[str, ...]
    changes: dict[str, Any] = field(default_factory=dict)


SEND_NOW = Repair("outbox_message.send_now", (Status.PENDING, Status.RETRY))
SEND_AGAIN = Repair("outbox_message.send_again", (Status.DEAD,), {"status": Status.PENDING, "attempts": 0})
RELEASE = Repair("outbox_message.release", (Status.IN_FLIGHT,), {"status": Status.RETRY, "lease_expires_at": None})


def _repair(
    message: OutboxMessage, repair: Repair, *, actor: str, user: Any, reason: str, guard: Q | None = None
) -> OutboxMessage:
    now = timezone.now()
    status_before = message.status
    if status_before not in repair.allowed:
        raise InvalidTransition(f"{repair.action} applies to {', '.join(repair.allowed)} messages, not {status_before}")
    with transaction.atomic():
        # Guarded by the status and fencing token we looked at: if a drainer claimed the
        # message meanwhile, the action is refused rather than racing the drainer.
        won = compare_and_set(
            OutboxMessage.objects.filter(guard or Q(), pk=message.pk), "fencing_token", message.fencing_token,
            status_before, next_attempt_at=now, updated_at=now, **repair.changes,
        )
        if not won:
            raise InvalidTransition(f"outbox message {message.key!r} changed; look again")
        message.refresh_from_db()
        audit.record(actor, repair.action, message, status_before, message.status, reason, user=user)
    return message


def send_now(message: OutboxMessage, *, actor: str, user: Any = None, reason: str = "") -> OutboxMessage:
    """Make a waiting message (pending or retry) due now instead of at its backoff time."""
    return _repair(message, SEND_NOW, actor=actor, user=user, reason=reason)


def send_again(message: OutboxMessage, *, actor: str, user: Any = None, reason: str = "") -> OutboxMessage:
    """Give a dead message a fresh set of attempts, due now."""
    return _repair(message, SEND_AGAIN, actor=actor, user=user, reason=reason)


def release(message: OutboxMessage, *, actor: str, user: Any = None, reason: str = "") -> OutboxMessage:
    """Take an in-flight message whose drainer's lease ran out from that drainer, due now,
    without waiting for the next drain to notice. The claim counts as an attempt (the drainer may
    have performed it: the key lets the receiver absorb a second send). Refused while the
    lease is live, so a drainer still inside it is never cut off; a drainer that outlived
    it can no longer record its result once the next claim bumps the token."""
    now = timezone.now()
    if not is_stuck(message, Status.IN_FLIGHT, now):
        raise InvalidTransition(f"outbox message {message.key!r} is not past its lease")
    return _repair(message, RELEASE, actor=actor, user=user, reason=reason, guard=Q(lease_expires_at__lt=now))


def lasting_failure(message: OutboxMessage) -> str:
    """Why sending the message again would fail as its last attempt did ("" when it may not):
    its action is not registered in this process, or the last attempt was refused with a
    4xx that no retry changes (all but 408, 409, 425 and 429). `lasting_failures` is the same
    question asked in SQL."""
    if message.action not in registered():
        return (f"No outbox action {message.action!r} is registered here: no drainer with this code can "
                "send it, so it will wait (or fail) again until the action is deployed.")
    if lasting_status(message.last_status_code):
        return (f"Its last attempt was refused with HTTP {message.last_status_code}: sent again unchanged, it "
                f"will most likely be refused again (only {', '.join(map(str, sorted(RETRYABLE_4XX)))} and 5xx "
                "pass on a retry). Fix the cause at the receiver first.")
    return ""


def lasting_failures() -> Q:
    return ~Q(action__in=registered()) | lasting_status_q("last_status_code")


# Each dead message sent again through `send_again`: one compare-and-set and one audit entry per
# row; a row that changed meanwhile is skipped.
send_again_many = bulk.many(send_again, Q(status=Status.DEAD), refused=(InvalidTransition,))
