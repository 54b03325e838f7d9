"""Renew the leases of `@idempotent` views, and of steps run by the in-process API
(receipts/inprocess.py), that run long, so that a slow step is not taken over while it
still runs.

A view registers its claim when it starts and unregisters when it returns (`kept`): a dict
entry under a lock, no thread and no query per request. One daemon thread per process renews,
through `store.renew`, each claim that has run for a third of its lease, then every third of
it. The thread opens its own database connection only when it first renews, so a process
whose views are all quick never renews anything; it is not a request, so waiters cannot
hold it up."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import DatabaseError, connection

from receipts import store
from receipts.conf import setting

log = logging.getLogger(__name__)

_lock = threading.Lock()
_running: dict[int, _Claim] = {}
_changed = threading.Event()
_thread: threading.Thread | None = None
_next_look = 0.0  # when the thread looks next (time.monotonic()), under _lock

# How long the thread sleeps when nothing is due (it is woken when a view registers).
IDLE = 5.0


@dataclass(eq=False)
class _Claim:
    scope: str
    key: str
    token: int
    lease: float
    started: float
    due: float
    # Held while this claim is renewed; unregistering takes it, so no renewal is in flight after.
    busy: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False


@contextlib.contextmanager
def kept(scope: str, key: str, token: int, lease_seconds: float) -> Iterator[None]:
    """Renew the claim (scope, key, token) every third of `lease_seconds` while the block runs.
    Leaving the block waits for a renewal of that claim in flight, so no renewal races the
    view's completion."""
    # On SQLite the view's transaction took the database's one write lock when it began
    # ("transaction_mode": "IMMEDIATE"), so no other claim can take the key over while the view
    # runs, and a renewal would only queue for that lock. A step of the in-process API runs
    # outside any transaction, so on SQLite too its claim is renewed like any other.
    if connection.vendor == "sqlite" and connection.in_atomic_block:
        yield
        return
    now = time.monotonic()
    claim = _Claim(scope, key, token, lease_seconds, now, now + lease_seconds / 3)
    with _lock:
        _running[id(claim)] = claim
        _ensure_thread()
        sooner = claim.due < _next_look
    if sooner:  # rare: the thread sleeps until the earliest due claim, or IDLE
        _changed.set()
    try:
        yield
    finally:
        with claim.busy:
            claim.done = True
        with _lock:
            _running.pop(id(claim), None)


def running() -> int:
    """How many views of this process have their claims kept now."""
    return len(_running)


def _ensure_thread() -> None:
    global _thread
    if _thread is None or not _thread.is_alive():
        _thread = threading.Thread(target=_renew_forever, name="receipts-renewal", daemon=True)
        _thread.start()


def _renew_forever() -> None:
    global _next_look
    while True:
        with _lock:
            claims = list(_running.values())
        now = time.monotonic()
        for claim in claims:
            if claim.due <= now:
                _renew(claim, now)
        with _lock:
            if not _running:
                connection.close()  # nothing to renew: no connection held for it
            _next_look = min([claim.due for claim in _running.values()] + [now + IDLE])
        _changed.wait(max(0.05, _next_look - time.monotonic()))  # or until a view is due sooner
        _changed.clear()


def _renew(claim: _Claim, now: float) -> None:
    """Renew one due claim. A view that has run longer than RECEIPTS_MAX_LEASE_SECONDS is
    presumed hung and no longer renewed: its lease lapses and the next attempt takes over. A
    renewal refused for a stale token (an operator released the key) stops the renewals; the
    view's completion is then refused too and its writes roll back (409 `lease-lost`)."""
    with claim.busy:
        if claim.done:
            return
        if now - claim.started > setting("RECEIPTS_MAX_LEASE_SECONDS"):
            log.warning("view holding %s/%s still runs after RECEIPTS_MAX_LEASE_SECONDS; its lease is "
                        "no longer renewed", claim.scope, claim.key)
            claim.due = float("inf")
            return
        try:
            store.renew(claim.scope, claim.key, claim.token, lease_seconds=max(1, round(claim.lease)))
            claim.due = now + claim.lease / 3
        except store.StaleToken:
            log.warning("the lease on %s/%s was lost while its view ran", claim.scope, claim.key)
            claim.due = float("inf")
        except DatabaseError as exc:  # tried again soon; the lease still has two thirds to run
            log.warning("renewing the lease on %s/%s failed (%s)", claim.scope, claim.key, exc)
            connection.close()
            claim.due = now + claim.lease / 6
