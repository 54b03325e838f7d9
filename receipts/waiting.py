"""Wake callers that wait for an in-flight first attempt. A settle wakes its key's waiters at
commit: in this process by `transaction.on_commit`, in others on PostgreSQL by a NOTIFY heard
by one LISTEN thread per process. A waiter also looks again on a growing timer, so a lost
notification costs latency, never correctness. At most RECEIPTS_MAX_WAITERS wait per process."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
from collections.abc import Iterator

from django.db import connection, transaction

from idemdash.core import pg
from receipts.conf import setting

log = logging.getLogger(__name__)

CHANNEL = "idemdash_receipts"

_lock = threading.Lock()
_waiters: dict[str, set[Wakeup]] = {}
_listener: threading.Thread | None = None
_stop = threading.Event()
_waiting = 0  # callers of this process holding a waiting slot now (under _lock)

# The fallback timer: FIRST_INTERVAL, doubling up to MAX_INTERVAL.
FIRST_INTERVAL = 0.05
MAX_INTERVAL = 1.0


def topic(scope: str, key: str) -> str:
    """The NOTIFY payload for a key: short, and free of whatever characters the key holds."""
    return hashlib.sha1(f"{scope}\0{key}".encode()).hexdigest()[:20]


class Wakeup:
    """One waiter of one key: an Event a sync caller sleeps on, or an async caller's future."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.event = threading.Event()
        self.interval = FIRST_INTERVAL
        self.holds_slot = False
        self.future: asyncio.Future[None] | None = None  # what an async waiter awaits now

    def set(self) -> None:
        # Under _lock. The event first: an async waiter sets its future first and reads the
        # event after, so one of the two always sees the other.
        self.event.set()
        future = self.future
        if future is not None:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
                future.get_loop().call_soon_threadsafe(_resolve, future)

    def take_slot(self) -> bool:
        """May this caller wait? It holds one of the process's RECEIPTS_MAX_WAITERS slots until
        the subscription ends: waiters that took every thread would starve the completions and
        renewals they wait for, until leases lapsed and the step ran twice."""
        global _waiting
        if not self.holds_slot:
            with _lock:
                if _waiting >= setting("RECEIPTS_MAX_WAITERS"):
                    return False
                _waiting += 1
            self.holds_slot = True
        return True

    def wait(self, timeout: float) -> bool:
        _ensure_listener()
        woke = self.event.wait(min(timeout, self.interval))
        self.interval = min(self.interval * 2, MAX_INTERVAL)
        self.event.clear()
        return woke

    async def async_wait(self, timeout: float) -> bool:
        """`wait` on the event loop: the same wake-ups and fallback timer, no thread held."""
        _ensure_listener()
        self.future = asyncio.get_running_loop().create_future()
        try:
            woke = self.event.is_set()
            if not woke:
                done, _ = await asyncio.wait({self.future}, timeout=min(timeout, self.interval))
                woke = bool(done)
        finally:
            self.future = None
        self.interval = min(self.interval * 2, MAX_INTERVAL)
        self.event.clear()
        return woke


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


@contextlib.contextmanager
def subscription(scope: str, key: str) -> Iterator[Wakeup]:
    global _waiting
    wakeup = Wakeup(topic(scope, key))
    with _lock:
        _waiters.setdefault(wakeup.topic, set()).add(wakeup)
    try:
        yield wakeup
    finally:
        with _lock:
            if wakeup.holds_slot:
                _waiting -= 1
            wakeups = _waiters.get(wakeup.topic)
            if wakeups is not None:
                wakeups.discard(wakeup)
                if not wakeups:
                    del _waiters[wakeup.topic]


def waiting_now() -> int:
    """How many callers of this process hold a waiting slot."""
    return _waiting


def _wake(topic: str) -> None:
    with _lock:
        for wakeup in _waiters.get(topic, ()):
            wakeup.set()


def wake_on_commit(scope: str, key: str) -> None:
    """Wake this process's waiters of the key once the current transaction commits."""
    name = topic(scope, key)
    transaction.on_commit(lambda: _wake(name))


def _ensure_listener() -> None:
    global _listener
    # psycopg 3 only; elsewhere other processes' settles are seen by the fallback timer.
    if not pg.usable():
        return
    with _lock:
        if _listener is not None and _listener.is_alive():
            return
        # The parameters Django itself connects with, OPTIONS included.
        params = connection.get_connection_params()
        params.setdefault("connect_timeout", 5)
        _stop.clear()
        _listener = threading.Thread(target=_listen, args=(params,), name="receipts-listen", daemon=True)
        _listener.start()


def _listen(params: dict) -> None:
    import psycopg

    while not _stop.is_set():
        try:
            with psycopg.connect(**params, autocommit=True) as conn:
                conn.execute(f"LISTEN {CHANNEL}")
                while not _stop.is_set():
                    for note in conn.notifies(timeout=0.5):
                        _wake(note.payload)
        except Exception as exc:  # the fallback timer keeps waiters correct meanwhile
            # Expected whenever the server restarts or fails over: one line, no traceback.
            reason = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("receipt LISTEN connection lost (%s); reconnecting", reason)
            _stop.wait(1)


def stop_listener() -> None:
    """Close the LISTEN connection (before a test database is dropped, or at shutdown)."""
    global _listener
    _stop.set()
    thread, _listener = _listener, None
    if thread is not None:
        thread.join(timeout=5)
