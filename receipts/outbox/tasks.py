"""django-q2 entry points, referred to by dotted path from schedules.py and store.send_soon."""

from receipts.outbox import drain as _drain
from receipts.outbox.conf import setting

TICK_DRAIN_SECONDS = 5


def drain() -> dict[str, int]:
    # The safety net behind `send`: one scheduled run keeps draining (looking again every
    # second) for most of its minute, so a retry is sent about a second after its backoff
    # and a message whose `send` task was lost waits no longer.
    return _drain.drain(max_seconds=setting("OUTBOX_DRAIN_SECONDS"), idle_wait=1).as_dict()


def send(message_id: int) -> dict[str, int]:
    # Enqueued when the message's transaction commits (store.send_soon).
    return _drain.drain(ids=[message_id]).as_dict()


def drain_due() -> dict[str, int]:
    # The tick's drain: what is due now, for a few seconds at most (what it claimed but
    # had no time for is handed back), so that it never keeps a worker from the next tick.
    return _drain.drain(max_seconds=TICK_DRAIN_SECONDS).as_dict()
