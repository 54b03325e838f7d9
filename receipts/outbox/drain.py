"""The drain: claim a batch, perform each message outside any transaction, record the result.

Run it from as many processes as you like. Claims are disjoint (see store.claim_batch),
and a drainer renews a message's lease just before performing it and keeps it while the
action runs (store.sending); the action's timeout is kept below the lease so that even a
send whose renewals fail cannot outlive its claim. A drainer that dies loses nothing: its
messages become claimable again when their leases run out.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

from idemdash.core import tracing
from receipts.outbox import store
from receipts.outbox.actions import ActionContext, PermanentError, RetryableError, UnknownAction, get_action
from receipts.outbox.conf import setting
from receipts.outbox.models import OutboxMessage

log = logging.getLogger(__name__)

# Whether the process running the drain is being stopped. The worker points it at its
# cluster's stop flag (idemdash/worker/cluster.py), so that a drain in flight stops at its
# next message and hands back the rest instead of running out its time.
_stopping: Callable[[], bool] = lambda: False
# Whether other tasks wait for this process's cluster (idemdash/worker/cluster.py points it at
# the cluster's task queue): a drain that has sent a message hands back the rest then, so a
# webhook event or a prompt send never waits behind a long drain for more than one send.
_others_waiting: Callable[[], bool] = lambda: False


def stop_when(stopping: Callable[[], bool]) -> None:
    global _stopping
    _stopping = stopping


def yield_when(waiting: Callable[[], bool]) -> None:
    global _others_waiting
    _others_waiting = waiting


@dataclass
class DrainReport:
    claimed: int = 0
    sent: int = 0
    retried: int = 0
    dead: int = 0
    stale: int = 0
    released: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def drainer_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def drain(
    *,
    max_seconds: float | None = None,
    idle_wait: float = 0,
    batch_size: int | None = None,
    drainer: str | None = None,
    ids: list[int] | None = None,
) -> DrainReport:
    """Send due messages until none is due, or, with `idle_wait`, keep looking every
    `idle_wait` seconds until `max_seconds` have passed.

    Messages claimed but not started when time runs out, when this process is asked to
    stop, or (once one was sent) when other tasks wait for the worker, are handed back, not
    left to wait for their lease. With `ids`, only those messages are claimed.
    """
    drainer = drainer or drainer_name()
    report = DrainReport()
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    performed, yielding = 0, False

    def out_of_time() -> bool:
        return _stopping() or (deadline is not None and time.monotonic() >= deadline)

    while not out_of_time():
        batch = store.claim_batch(drainer, batch_size=batch_size, ids=ids)
        report.claimed += len(batch)
        if not batch:
            if idle_wait <= 0 or deadline is None:
                break
            time.sleep(min(idle_wait, max(0.0, deadline - time.monotonic())))
            continue
        for message in batch:
            yielding = yielding or (performed > 0 and _others_waiting())
            if yielding or out_of_time():
                report.released += store.hand_back(message)
                continue
            perform(message, drainer, report)
            performed += 1
        if yielding:
            break
    return report


# The span of one send: its context is what an action passes on (`http.post` sends it as
# `traceparent`), so the receiver's trace continues the sender's.
SEND_SPAN = "idemdash.outbox.send"


def perform(message: OutboxMessage, drainer: str, report: DrainReport) -> None:
    lease = float(setting("OUTBOX_LEASE_SECONDS"))
    if not store.renew_lease(message, lease_seconds=lease):
        report.stale += 1
        return
    ctx = ActionContext(
        key=message.key,
        scope=message.scope,
        attempt=message.attempts,
        timeout=max(0.5, min(float(setting("OUTBOX_HTTP_TIMEOUT_SECONDS")), lease - 1)),
    )
    started = time.monotonic()
    status_code: int | None = None
    error: Exception | None = None
    # Inside the send task, its span (which continues the enqueuer's trace) is the parent; a
    # scheduled drain has none, and continues the trace stored with the message.
    stored = {"traceparent": message.traceparent} if message.traceparent and not tracing.current().is_recording() else None
    with tracing.span(SEND_SPAN, kind=tracing.PRODUCER, parent=stored) as span:
        try:
            with store.sending(message, lease):
                status_code = get_action(message.action).perform(message.payload, ctx)
        except Exception as exc:  # every failure is recorded on the message, never raised
            error = exc
        if span.is_recording():
            span.set_attributes({
                "idemdash.outbox.message_id": message.pk, "idemdash.outbox.action": message.action,
                "idemdash.outbox.attempt": message.attempts, "idemdash.fencing_token": message.fencing_token,
                **({"server.address": message.destination_host} if message.destination_host else {}),
                **({"http.response.status_code": status_code} if status_code is not None else {}),
                **({"error.type": type(error).__name__} if error is not None else {}),
            })
    duration_ms = int((time.monotonic() - started) * 1000)
    try:
        if error is None:
            store.mark_sent(message, status_code=status_code, duration_ms=duration_ms, drainer=drainer)
            report.sent += 1
            return
        # A drainer claims only actions it has (store.claim_batch); one unregistered in the
        # moment between claim and perform is retried, not dead, for a drainer that has it.
        expected = isinstance(error, (PermanentError, RetryableError))
        if not expected and not isinstance(error, UnknownAction):
            log.warning("outbox action %s raised for %s", message.action, message.key, exc_info=error)
        status = store.mark_failed(
            message,
            str(error) if expected else f"{type(error).__name__}: {error}",
            permanent=isinstance(error, PermanentError),
            retry_after=getattr(error, "retry_after", None),
            status_code=getattr(error, "status_code", None),
            duration_ms=duration_ms,
            drainer=drainer,
        )
        if status == OutboxMessage.Status.DEAD:
            report.dead += 1
        else:
            report.retried += 1
    except store.StaleClaim:
        log.warning("outbox message %s was re-claimed while %s performed it", message.key, drainer)
        report.stale += 1
