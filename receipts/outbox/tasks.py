"""django-q2 entry points, referred to by dotted path from schedules.py."""

from receipts.outbox import drain as _drain
from receipts.outbox.conf import setting


def drain() -> dict[str, int]:
    # One scheduled run keeps draining (looking again every second) for most of its
    # minute, so a new message waits about a second, not until the next schedule tick.
    return _drain.drain(max_seconds=setting("OUTBOX_DRAIN_SECONDS"), idle_wait=1).as_dict()
