"""django-q2 entry points, referred to by dotted path from schedules.py and store.send_soon.

With OUTBOX_DRAIN off, each claims nothing: the schedules stay declared (their table may be
shared with a project that drains), but this project's worker leaves the outbox alone."""

from typing import Any

from idemdash.core import tracing
from receipts.outbox import drain as _drain
from receipts.outbox.conf import setting

TICK_DRAIN_SECONDS = 5


def _worker_drain(**options: Any) -> dict[str, int]:
    if not setting("OUTBOX_DRAIN"):
        return _drain.DrainReport().as_dict()
    return _drain.drain(**options).as_dict()


def drain() -> dict[str, int]:
    # The safety net behind `send` and the tick's drain_due, and what a resume asks for
    # (pauses.drain_soon): what is due, for at most OUTBOX_DRAIN_SECONDS. It does not wait for
    # more (a worker held idle is one a webhook event waits for), and it yields to other tasks
    # after each send (drain.yield_when).
    return _worker_drain(max_seconds=setting("OUTBOX_DRAIN_SECONDS"))


def send(message_id: int, traceparent: str | None = None) -> dict[str, int]:
    # Enqueued when the message's transaction commits (store.send_soon), with the trace
    # context of whoever enqueued the message: its send span continues that trace.
    with tracing.task(SEND_TASK_SPAN, traceparent):
        return _worker_drain(ids=[message_id])


SEND_TASK_SPAN = "idemdash.outbox.send_task"


def drain_due() -> dict[str, int]:
    # The tick's drain: what is due now, for a few seconds at most (what it claimed but
    # had no time for is handed back), so that it never keeps a worker from the next tick.
    return _worker_drain(max_seconds=TICK_DRAIN_SECONDS)
