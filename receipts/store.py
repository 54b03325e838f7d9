"""The receipt state machine: claim, complete, fail, release, and renew (a heartbeat). Every
transition is a unique insert or an UPDATE fenced by the token (and status) the caller last
saw, with a rowcount check; each ownership change bumps the token."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.http import HttpResponseBase
from django.utils import timezone

from idemdash.core import audit as audit_log
from idemdash.core import bulk
from idemdash.core import leases
from idemdash.core import pg as core_pg
from idemdash.core import tracing
from idemdash.core.attempts import lasting_status, lasting_status_q
from idemdash.core.canonical import fingerprint_json
from idemdash.core.leases import NotApplicable, StaleToken, compare_and_set
from idemdash.core.mysql import retry_deadlocks
from receipts import fresh_keys, orm, pg, responses, rules, waiting
from receipts.conf import Policy, policy_for, reconciler, setting
from receipts.downstream import downstream_key
from receipts.models import Attempt, Receipt, ReceiptReference
from receipts.orm import log_settle

log = logging.getLogger(__name__)

Outcome = Attempt.Outcome
Status = Receipt.Status

OWNING_OUTCOMES = frozenset({Outcome.CLAIMED, Outcome.RETRIED_AFTER_FAILURE, Outcome.LEASE_TAKEOVER})


class NotReleasable(NotApplicable):
    """A completed receipt, or (for an operator) one already released."""


class NotHeld(NotApplicable):
    """An operator's repair of an outcome-unknown receipt, on a receipt that is not one."""


class InvalidResult(ValueError):
    """A result an operator gave that is not JSON."""


class _NotDone:
    def __repr__(self) -> str:
        return "NOT_DONE"


# What a reconcile function returns when the provider has no trace of the effect.
NOT_DONE = _NotDone()


@dataclass(frozen=True)
class Unsettled:
    """What a reconcile function is asked about: a held attempt (docs/receipt-store.md)."""

    scope: str
    key: str
    operation: str
    request: Any
    attempts: int
    downstream_key: str
    lease_expired_at: datetime | None


# receipts/pg.py or its plain-ORM twin receipts/orm.py, chosen once per database.
path = core_pg.choose(pg, orm)

# A released receipt's status in the audit log (Receipt.shown_status).
RELEASED = "released"


@dataclass(frozen=True)
class Held:
    """An attempt's hold on its receipt: the key and the fencing token it owns it by."""

    scope: str
    key: str
    token: int


@dataclass
class ClaimResult:
    outcome: str
    receipt: Receipt
    token: int | None = None
    wait_refused: bool = False  # refused a waiting slot (RECEIPTS_MAX_WAITERS): it did not wait
    waited_ms: int | None = None  # how long it waited for the running first attempt

    @property
    def owned(self) -> bool:
        return self.outcome in OWNING_OUTCOMES

    @property
    def held(self) -> Held:
        """What settles an owned claim."""
        assert self.token is not None and self.owned, self.outcome
        return Held(self.receipt.scope, self.receipt.key, self.token)

    @property
    def retry_after(self) -> int:
        """Seconds a 409'd caller should wait: what is left of the lease, 1 to 10."""
        lease = self.receipt.lease_expires_at
        if lease is None:
            return 1
        left = (lease - timezone.now()).total_seconds()
        return int(max(1, min(10, left + 0.999)))


def claim(scope: str, key: str, operation: str, request: Any = None, **options: Any) -> ClaimResult:
    """Claim (scope, key) for one execution of `operation`: the caller owns the receipt
    (ClaimResult.owned) and must settle it, or must not run. Takes `_claiming`'s options."""
    with tracing.span(CLAIM_SPAN) as span:
        steps = _claiming(scope, key, operation, request, **options)
        try:
            wait = next(steps)
            while True:
                wait.wakeup.wait(wait.timeout)
                wait = steps.send(None)
        except StopIteration as done:
            return _traced(span, operation, done.value)
        finally:
            steps.close()


async def aclaim(scope: str, key: str, operation: str, request: Any = None, **options: Any) -> ClaimResult:
    """`claim` for async callers: its steps on one sync thread, its waits on the event loop."""
    with tracing.span(CLAIM_SPAN) as span:
        steps = _claiming(scope, key, operation, request, **options)
        try:
            done, step = await _astep(steps, None)
            while not done:
                await step.wakeup.async_wait(step.timeout)
                done, step = await _astep(steps, None)
            return _traced(span, operation, step)
        finally:
            # A claim cancelled while its step still runs is closed when it is collected.
            with contextlib.suppress(ValueError):
                steps.close()


CLAIM_SPAN = "idemdash.receipt.claim"
REPLAY_SPAN = "idemdash.receipt.replay"  # the claim's span, renamed when it replays


def _traced(span: Any, operation: str, result: ClaimResult) -> ClaimResult:
    """The claim's span told what it decided, when it is recorded."""
    if span.is_recording():
        if result.outcome == Outcome.REPLAYED:
            span.update_name(REPLAY_SPAN)
        span.set_attributes({
            "idemdash.operation": operation,
            "idemdash.key.digest": waiting.topic(result.receipt.scope, result.receipt.key),
            "idemdash.claim.outcome": str(result.outcome),
            "idemdash.receipt.id": result.receipt.pk,
            **({"idemdash.fencing_token": result.token} if result.token is not None else {}),
            **({"idemdash.claim.waited_ms": result.waited_ms} if result.waited_ms is not None else {}),
        })
    return result


@dataclass(frozen=True)
class _Wait:
    wakeup: waiting.Wakeup
    timeout: float


def _step(steps: Generator[_Wait, None, ClaimResult], value: None) -> tuple[bool, Any]:
    """Resume a claim: (False, the _Wait it waits for) or (True, its ClaimResult)."""
    try:
        return False, steps.send(value)
    except StopIteration as done:
        return True, done.value


# Thread-sensitive: every look of one claim runs on the same thread and connection.
_astep = sync_to_async(_step, thread_sensitive=True)


def _claiming(
    scope: str,
    key: str,
    operation: str,
    request: Any = None,
    *,
    fingerprint: str | None = None,
    lease_seconds: int | None = None,
    wait_seconds: float = 0,
    user_id: str = "",
    session_id: str = "",
) -> Generator[_Wait, None, ClaimResult]:
    """The one copy of a claim: yields where it waits for the running first attempt."""
    # When the claim's own work began (claim_ms): moved on by every wait, counted in `waited_ms`.
    started = time.monotonic()
    policy = policy_for(operation)
    lease = _lease_length(policy, lease_seconds)
    fp = fingerprint or fingerprint_json(request)
    wait_seconds = max(0.0, min(float(wait_seconds or 0), float(setting("RECEIPTS_MAX_WAIT_SECONDS"))))
    # Set by the look that finds the first attempt running, so a slow first look eats no wait.
    deadline: float | None = None
    intent = _Intent(scope, key, operation, request, fp, policy, lease, user_id, session_id)
    announced = False
    waited_since: float | None = None
    # Subscribed before the first look, so a settle between a look and the wait still wakes us.
    with waiting.subscription(scope, key) if wait_seconds else contextlib.nullcontext() as wakeup:
        while True:
            existing = None
            raced: tuple[float, float] | None = None  # (start, end) of a statement that waited
            now = timezone.now()
            if waited_since is None and intent.policy.fresh_key == "allow":
                # PostgreSQL: a new key or a replay in one statement; any other case returns the row.
                began = time.monotonic()
                found = path().claim_or_replay(_new_receipt(intent, now), now, (began - started) * 1000)
                if found is None and path() is pg:
                    # It waited on another attempt's uncommitted insert: a replay now is one it waited for.
                    raced = (began, time.monotonic())
                if found is not None:
                    logged, existing = found
                    if logged == Outcome.CLAIMED:
                        return ClaimResult(Outcome.CLAIMED, existing, token=1)
                    if logged == Outcome.REPLAYED:
                        return ClaimResult(Outcome.REPLAYED, existing)
            elif waited_since is not None:
                # After a wait the statement's own "replayed" line would hide the wait.
                existing = Receipt.objects.filter(scope=scope, key=key).first()
            result, reconcile, settled, deadline = _decide(
                intent, existing, wakeup, deadline, wait_seconds, waited_since, raced, started
            )
            if reconcile:
                answered = _reconciled(intent, result, started)
                if answered is None:
                    continue  # resolved, or changed meanwhile: look again (a replay, most often)
                return answered
            if settled:
                return result
            if waited_since is None:
                waited_since = time.monotonic()
            if not announced:
                announced = True
                if not path().announce_waiter(result.receipt):
                    continue  # settled meanwhile: look again at once
            # Wake on completion, or when the lease runs out (we may then take over).
            lease_left = (result.receipt.lease_expires_at - timezone.now()).total_seconds()
            paused = time.monotonic()
            yield _Wait(wakeup, max(0.01, min(deadline - paused, lease_left + 0.01)))
            started += time.monotonic() - paused


@retry_deadlocks
def _decide(
    intent: _Intent, existing: Receipt | None, wakeup: waiting.Wakeup | None, deadline: float | None,
    wait_seconds: float, waited_since: float | None, raced: tuple[float, float] | None, started: float,
) -> tuple[ClaimResult, bool, bool, float]:
    """One look of a claim: the decision and its log line, committed together. Returns the
    result, whether to ask the reconcile, whether it is settled, and when its wait ends."""
    with transaction.atomic():
        result = _refusing_fresh_keys(intent, existing) if intent.policy.fresh_key == "refuse" else \
            _claim_once(intent, existing=existing)
        # Asked outside this transaction: a provider's answer must not hold SQLite's one writer.
        reconcile = result.outcome == Outcome.OUTCOME_UNKNOWN and intent.policy.reconcile is not None
        if deadline is None:
            deadline = time.monotonic() + wait_seconds
        left = deadline - time.monotonic()
        # Over the process's cap on waiters, a duplicate is refused at once (receipts/waiting.py).
        settled = result.outcome != Outcome.IN_PROGRESS or left <= 0 or not wakeup.take_slot()
        result.wait_refused = result.outcome == Outcome.IN_PROGRESS and left > 0 and not wakeup.holds_slot
        if waited_since is not None:
            result.waited_ms = math.ceil((time.monotonic() - waited_since) * 1000)
        elif raced is not None and result.outcome == Outcome.REPLAYED:
            result.waited_ms = math.ceil((time.monotonic() - raced[0]) * 1000)
            # That statement was the wait: in `waited_ms`, so not in `claim_ms` too.
            started += raced[1] - raced[0]
        if settled and not reconcile:
            refused = result.outcome == Outcome.FRESH_KEY_RETRY
            _record(result, intent.request if result.outcome == Outcome.MISMATCH else None, intent.fp, started,
                    **({"key": intent.key, "detail": f"the same request as the key {result.receipt.key!r}"}
                       if refused else {}))
    return result, reconcile, settled, deadline


def _refusing_fresh_keys(intent: _Intent, existing: Receipt | None) -> ClaimResult:
    """`_claim_once`, where a new key whose request another key of the window made is rolled
    back and answered FRESH_KEY_RETRY with that key's receipt."""
    with transaction.atomic():
        result = _claim_once(intent, existing=existing)
        if result.outcome == Outcome.CLAIMED:
            earlier = fresh_keys.first_use(result.receipt, result.receipt.updated_at)
            if earlier is not None:
                transaction.set_rollback(True)  # this savepoint only: the new life is undone
                return ClaimResult(Outcome.FRESH_KEY_RETRY, earlier)
    return result


@dataclass(frozen=True)
class _Intent:
    scope: str
    key: str
    operation: str
    request: Any
    fp: str
    policy: Policy
    lease: timedelta
    user_id: str
    session_id: str


def _lease_length(policy: Policy, lease_seconds: int | None) -> timedelta:
    if lease_seconds is None:
        return policy.lease
    return timedelta(seconds=max(1, min(int(lease_seconds), setting("RECEIPTS_MAX_LEASE_SECONDS"))))


def _claim_once(intent: _Intent, *, existing: Receipt | None = None) -> ClaimResult:
    # Bounded: each lost race means another caller changed the row, which we then re-read.
    for _ in range(50):
        now = timezone.now()
        receipt, existing = existing, None  # a row the caller already read, first time only
        if receipt is None:
            try:
                with transaction.atomic():
                    receipt = Receipt.objects.create(**_new_receipt(intent, now))
                return ClaimResult(Outcome.CLAIMED, receipt, token=1)
            except IntegrityError:
                pass  # the key exists: decide from its state below

            receipt = Receipt.objects.filter(scope=intent.scope, key=intent.key).first()
            if receipt is None:
                continue  # purged between our insert and our read; insert again

        if rules.EXPIRED.holds(receipt, now=now):
            # Expired counts as absent: a new life on the same row, every field as for a new key.
            fresh = _new_receipt(intent, now)
            for kept in ("scope", "key", "fencing_token", "updated_at"):
                del fresh[kept]
            won = _transition(receipt, now, expect_status=receipt.status, **fresh)
            if won:
                return ClaimResult(Outcome.CLAIMED, won, token=won.fencing_token)
            continue

        if receipt.fingerprint != intent.fp:
            return ClaimResult(Outcome.MISMATCH, receipt)

        if rules.REPLAY.holds(receipt, fingerprint=intent.fp, now=now):
            return ClaimResult(Outcome.REPLAYED, receipt)  # completed, or the key was burned

        if receipt.status == Status.FAILED:  # retryable, or released
            won = _transition(
                receipt, now, expect_status=Status.FAILED, status=Status.PROCESSING, attempts=receipt.attempts + 1,
                lease_expires_at=now + intent.lease, error="", released_at=None, released_by="", release_reason="",
            )
            if won:
                return ClaimResult(Outcome.RETRIED_AFTER_FAILURE, won, token=won.fencing_token)
            continue

        if not rules.LAPSED.holds(receipt, now=now):
            return ClaimResult(Outcome.IN_PROGRESS, receipt)
        if intent.policy.after_crash == "hold":
            return ClaimResult(Outcome.OUTCOME_UNKNOWN, receipt)
        won = _take_over(receipt, intent, now)
        if won:
            return ClaimResult(Outcome.LEASE_TAKEOVER, won, token=won.fencing_token)
    raise RuntimeError(f"claim of {intent.scope}/{intent.key} lost 50 races in a row")  # pragma: no cover


def _take_over(receipt: Receipt, intent: _Intent, now: datetime) -> Receipt | None:
    """Start the next attempt on a lapsed receipt; fenced on the lapse too, as a reconcile's
    question takes long enough for a live worker to renew."""
    return _transition(receipt, now, expect_status=Status.PROCESSING, where=rules.LAPSED.q(now=now),
                       attempts=receipt.attempts + 1, lease_expires_at=now + intent.lease)


def _reconciled(intent: _Intent, held: ClaimResult, started: float) -> ClaimResult | None:
    """Ask the operation's reconcile function about a held receipt: NOT_DONE lets this claim
    take it over; a result completes it (None: look again, and replay); raising, or a result
    that cannot be stored, leaves it outcome-unknown."""
    receipt = held.receipt
    unsettled = Unsettled(
        scope=receipt.scope, key=receipt.key, operation=receipt.operation, request=receipt.request,
        attempts=receipt.attempts, downstream_key=downstream_key(receipt.scope, receipt.key, receipt.created_at),
        lease_expired_at=receipt.lease_expires_at,
    )
    try:
        answer = reconciler(intent.policy)(unsettled)
        stored = None if answer is NOT_DONE else _stored_result(answer)
    except Exception as exc:  # the provider's error, whatever its class: the outcome stays unknown
        log.warning("reconcile of %s/%s raised; it stays outcome-unknown", receipt.scope, receipt.key, exc_info=True)
        with transaction.atomic():
            Attempt.record(receipt, outcome=Outcome.OUTCOME_UNKNOWN, fingerprint=intent.fp,
                           detail=f"reconcile raised {type(exc).__name__}: {exc}"[:2000], created_at=timezone.now(),
                           claim_ms=_spent_ms(started))
        return held
    now = timezone.now()
    with transaction.atomic():
        if stored is None:
            won = _take_over(receipt, intent, now)
            if not won:
                return None
            result = ClaimResult(Outcome.LEASE_TAKEOVER, won, token=won.fencing_token)
            _record(result, None, intent.fp, started)
            return result
        _resolve(receipt, stored, now, actor="", detail="reconciled: the provider has the effect")
    return None


def _stored_result(result: Any) -> dict[str, Any]:
    """The receipt's response fields for a Django response or JSON (else InvalidResult)."""
    if isinstance(result, HttpResponseBase):
        return {"response_status": result.status_code, "response_content_type": result.get("Content-Type", ""),
                "response_body": responses.encode(result.content, responses.kept_headers(result))}
    try:
        body = json.dumps(result, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidResult(f"The result cannot be stored as JSON: {exc}") from None
    return {"response_status": 200, "response_content_type": "application/json", "response_body": body}


def _resolve(receipt: Receipt, stored: dict[str, Any], now: datetime, *, actor: str, detail: str) -> bool:
    """Complete a held receipt with `stored`, fenced like a takeover (still the lapsed
    processing receipt that was read) and bumping the token. False if it changed."""
    won = _transition(receipt, now, expect_status=Status.PROCESSING, where=rules.LAPSED.q(now=now),
                      status=Status.COMPLETED, lease_expires_at=None, completed_at=now, **stored)
    if won:
        Attempt.record(won, outcome=Outcome.COMPLETED, fencing_token=won.fencing_token, detail=detail, actor=actor,
                       created_at=now)
        path().notify(receipt.scope, receipt.key)
    return won is not None


def _new_receipt(intent: _Intent, now: datetime) -> dict[str, Any]:
    return {
        "scope": intent.scope,
        "key": intent.key,
        "operation": intent.operation,
        "fingerprint": intent.fp,
        "request": intent.request,
        "lease_expires_at": now + intent.lease,
        "created_at": now,
        "updated_at": now,
        "expires_at": intent.policy.expires_at(now),
        "user_id": intent.user_id,
        "session_id": intent.session_id,
        **rules.NEW,
    }


def _transition(
    receipt: Receipt, now: datetime, *, expect_status: str, where: Q | None = None, **changes: Any
) -> Receipt | None:
    """Compare-and-set on (id, token, status, `where`), bumping the token; None if we lost."""
    won = compare_and_set(
        Receipt.objects.filter(where or Q(), pk=receipt.pk), "fencing_token", receipt.fencing_token, expect_status,
        fencing_token=F("fencing_token") + 1, updated_at=now, **changes,
    )
    if not won:
        return None
    for name, value in changes.items():
        setattr(receipt, name, value)
    receipt.fencing_token += 1
    receipt.updated_at = now
    return receipt


def _spent_ms(started: float) -> float:
    return (time.monotonic() - started) * 1000


def _record(result: ClaimResult, rejected_request: Any, fp: str, started: float, **named: str) -> None:
    r = result.receipt
    # A duplicate answered with the result it waited for is a concurrent duplicate, not a replay.
    waited = result.waited_ms is not None and result.outcome == Outcome.REPLAYED
    Attempt.record(
        r, outcome=Outcome.WAITED if waited else result.outcome, waited_ms=result.waited_ms, fencing_token=result.token,
        fingerprint=fp, request=rejected_request, created_at=timezone.now(), claim_ms=_spent_ms(started),
        **named,  # a refused fresh-key retry's key and detail
    )


@retry_deadlocks
def _settle(
    held: Held, outcome: str, detail: str = "", references: Iterable[tuple[str, str]] = (), **changes: Any
) -> None:
    now = timezone.now()
    scope, key, token = held.scope, held.key, held.token
    # No savepoint: inside the decorator's transaction a failure rolls it all back anyway.
    with tracing.span(SETTLE_SPAN) as span, transaction.atomic(savepoint=False):
        updated = path().settle(scope, key, token, outcome, detail, now, changes)
        stale = not updated and not _landed(held, changes)
        if span.is_recording():
            span.set_attributes({
                "idemdash.key.digest": waiting.topic(scope, key), "idemdash.settle.outcome": str(outcome),
                "idemdash.fencing_token": token, "idemdash.settle.stale": stale,
            })
        if stale:
            log_settle(scope, key, token, Outcome.STALE_TOKEN, detail, now)
        elif updated and references:
            # With the settle, or not at all; the settle's UPDATE holds the row.
            receipt_id = Receipt.objects.filter(scope=scope, key=key).values_list("pk", flat=True).get()
            ReceiptReference.store(receipt_id, references)
    if stale:
        raise StaleToken(f"token {token} no longer owns {key!r}")


def _landed(held: Held, changes: dict[str, Any]) -> bool:
    """Whether this very settlement landed already (sent again after its answer was lost).
    Compared in Python, so that MySQL's collations cannot call two bodies equal; read with a
    lock, so that under REPEATABLE READ it sees the settle we waited for."""
    compared = [name for name in changes if name != "completed_at"]  # the clock, not the result
    row = (Receipt.objects.select_for_update().filter(scope=held.scope, key=held.key)
           .values("fencing_token", *compared).first())
    return row is not None and row.pop("fencing_token") == held.token and row == {name: changes[name] for name in compared}


SETTLE_SPAN = "idemdash.receipt.settle"


def complete(
    held: Held,
    *,
    response_status: int | None = None,
    content_type: str = "",
    body: str = "",
    references: Iterable[tuple[str, str]] = (),
) -> None:
    """Store the result and `references`; StaleToken unless `held` still owns the receipt."""
    _settle(held, Outcome.COMPLETED, references=references, status=Status.COMPLETED, response_status=response_status,
            response_content_type=content_type, response_body=body, completed_at=timezone.now())


def fail(
    held: Held,
    *,
    error: str,
    retryable: bool | None = None,
    response_status: int | None = None,
    content_type: str = "",
    body: str = "",
    references: Iterable[tuple[str, str]] = (),
) -> None:
    """Mark the attempt failed, with `references`; retryable unless the operation burns keys."""
    if retryable is None:
        receipt = Receipt.objects.filter(scope=held.scope, key=held.key).only("operation").first()
        retryable = not (receipt and policy_for(receipt.operation).burn_on_failure)
    _settle(held, Outcome.FAILED, detail=error[:2000], references=references, status=Status.FAILED, retryable=retryable,
            error=error, response_status=response_status, response_content_type=content_type, response_body=body)


def lease_lost(held: Held, detail: str) -> None:
    """Log the attempt's lost lease again, after the transaction that logged it rolled back."""
    log_settle(held.scope, held.key, held.token, Outcome.STALE_TOKEN, detail)


def lasting_failure(receipt: Receipt) -> str:
    """Why the next attempt after a release would fail as this one did (a lasting 4xx), or ""."""
    if receipt.status == Status.FAILED and lasting_status(receipt.response_status):
        return (f"It failed with HTTP {receipt.response_status}: the caller's next attempt with the same request "
                "will most likely get it again.")
    return ""


def lasting_failures() -> Q:
    return Q(status=Status.FAILED) & lasting_status_q("response_status")


@retry_deadlocks
def renew(held: Held, *, lease_seconds: int | None = None) -> datetime:
    """A heartbeat: the lease renewed from now, returning its new end. Fenced like a settle;
    one after its own attempt settled is refused but not logged: no lease was lost."""
    scope, key, token = held.scope, held.key, held.token
    receipt = Receipt.objects.filter(scope=scope, key=key).only("operation").first()
    now = timezone.now()
    if receipt is not None:
        expires = now + _lease_length(policy_for(receipt.operation), lease_seconds)
        if Receipt.objects.filter(rules.SETTLE.q(token=token), scope=scope, key=key).update(lease_expires_at=expires):
            return expires
        if Receipt.objects.filter(scope=scope, key=key, fencing_token=token).exclude(status=Status.PROCESSING).exists():
            raise StaleToken(f"token {token} settled {key!r} already")
    log_settle(scope, key, token, Outcome.STALE_TOKEN, "heartbeat refused: the lease was lost", now)
    raise StaleToken(f"token {token} no longer owns {key!r}")


def kept(held: Held, lease_seconds: float) -> contextlib.AbstractContextManager[None]:
    """The claim's lease renewed while its view or step runs (idemdash/core/leases.py:kept)."""
    def renewal() -> None:
        renew(held, lease_seconds=max(1, round(lease_seconds)))
    return leases.kept(renewal, lease_seconds, f"receipt {held.scope}/{held.key}",
                       longest=setting("RECEIPTS_MAX_LEASE_SECONDS"))


def give_back(held: Held, reason: str) -> None:
    """The attempt gives its key back, storing nothing (`release` with its token)."""
    receipt = Receipt.objects.filter(scope=held.scope, key=held.key).first()
    if receipt is not None:
        release(receipt, token=held.token, reason=reason)


def release(
    receipt: Receipt,
    *,
    token: int | None = None,
    actor: str = "",
    reason: str = "",
    user: Any = None,
    audit_action: str = "receipt.release",
) -> Receipt:
    """Give the key back so that the caller's next attempt runs: the token bumped, the receipt
    failed and retryable with the release marker. An operator's release is audited."""
    now = timezone.now()
    status_before = receipt.status
    shown_before = receipt.shown_status
    if status_before == Status.COMPLETED:
        raise NotReleasable("A completed receipt keeps its result until it expires.")
    if token is None and receipt.released:
        raise NotReleasable("It is already released: the caller's next attempt will run.")
    changes: dict[str, Any] = {} if token is None else {"error": reason or "released"}
    with transaction.atomic():
        won = compare_and_set(
            Receipt.objects.filter(pk=receipt.pk), "fencing_token", receipt.fencing_token if token is None else token,
            status_before, status=Status.FAILED, retryable=True, lease_expires_at=None,
            fencing_token=F("fencing_token") + 1, updated_at=now, released_at=now, released_by=actor,
            release_reason=reason, **changes,
        )
        if not won:
            raise StaleToken(f"{receipt.key!r} changed before it could be released")
        Attempt.record(receipt, outcome=Outcome.RELEASED, fencing_token=token, detail=reason, actor=actor, created_at=now)
        if actor:
            audit_log.record(actor, audit_action, receipt, shown_before, RELEASED, reason, user=user)
        path().notify(receipt.scope, receipt.key)
    receipt.refresh_from_db()
    return receipt


# Each failed receipt not yet released, through `release`; a row that changed meanwhile is skipped.
release_many = bulk.many(release, Q(status=Status.FAILED, released_at=None), refused=(StaleToken, NotReleasable))


def mark_completed(receipt: Receipt, *, result: str, actor: str, reason: str = "", user: Any = None) -> Receipt:
    """An operator stores `result` (JSON text) for an outcome-unknown receipt to replay."""
    try:
        stored = _stored_result(json.loads(result))
    except ValueError as exc:
        raise InvalidResult(f"The result is not JSON: {exc}") from None
    if not receipt.outcome_unknown:
        raise NotHeld("Only an outcome-unknown receipt is marked completed by hand.")
    status_before = receipt.shown_status
    now = timezone.now()
    with transaction.atomic():
        if not _resolve(receipt, stored, now, actor=actor, detail=reason or "marked completed by an operator"):
            raise StaleToken(f"{receipt.key!r} changed before it could be marked completed")
        audit_log.record(actor, "receipt.mark_completed", receipt, status_before, Status.COMPLETED, reason, user=user)
    receipt.refresh_from_db()
    return receipt


def run_again(receipt: Receipt, *, actor: str, reason: str = "", user: Any = None) -> Receipt:
    """An operator releases an outcome-unknown receipt whose effect did not happen."""
    if not receipt.outcome_unknown:
        raise NotHeld("Only an outcome-unknown receipt is run again by hand; release any other.")
    return release(receipt, actor=actor, reason=reason, user=user, audit_action="receipt.run_again")
