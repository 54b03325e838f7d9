"""django-q2 entry points, referred to by dotted path from schedules.py and store.send_soon."""

from receipts.outbox import drain as _drain
from receipts.outbox.conf import setting


def drain() -> dict[str, int]:
    # The safety net behind `send`: one scheduled run keeps draining (looking again every
    # second) for most of its minute, so a retry is sent about a second after its backoff
    # and a message whose `send` task was lost waits no longer.
    return _drain.drain(max_seconds=setting("OUTBOX_DRAIN_SECONDS"), idle_wait=1).as_dict()


def send(message_id: int) -> dict[str, int]:
    # Enqueued when the message's transaction commits (store.send_soon).
    return _drain.drain(ids=[message_id]).as_dict()
