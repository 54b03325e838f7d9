"""What runs under a claim now: `receipts.current()` (and `idemdash_client.current()`).

Every front door that runs code under a claim sets it for as long as that code runs (the
in-process API, both HTTP clients' run_once, the @idempotent view decorator), so code deep
inside the step (a provider's SDK call three functions down) reads it without being handed
anything, above all the `downstream_key` to send as the provider's Idempotency-Key.

Here, in the client's distribution, and not in the receipts app: a worker without Django
reads it under the client's run_once, and the receipts app sets and reads this same
variable, so each side sees the other's claims."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from idemdash_client.references import RECEIPT, Cause, References, causing


@dataclass(frozen=True)
class RunningClaim:
    """The claim the current code runs under."""

    key: str
    scope: str
    operation: str
    # Proof of ownership: a settle with any other token is refused.
    fencing_token: int
    # 1 for the first attempt; a retry after a failure or a lease takeover counts up.
    attempt: int
    # The same for every attempt of this claim (receipts/downstream.py): send it to a
    # provider that honours idempotency keys, and a re-run after a crash is absorbed there.
    downstream_key: str
    # The receipt's row id, where the claim was made on the store (None for the HTTP client):
    # what an outbox message enqueued meanwhile records as its cause.
    receipt_id: int | None = None
    # What the step says it worked on (`refer`), stored with the attempt's completion or
    # failure, in the same transaction (clients/python/idemdash_client/references.py).
    references: References = field(default_factory=References, compare=False, repr=False)

    def refer(self, kind: str, value: str | int) -> None:
        """Attach a reference to what this attempt works on: `refer("stripe.charge", charge.id)`.
        Checked now (InvalidReference); stored when the attempt completes or fails."""
        self.references.refer(kind, value)


# A ContextVar, so it holds in asyncio tasks the step starts and in threads started with a
# copy of its context (`contextvars.copy_context().run`, asyncio.to_thread, asgiref's
# sync_to_async), and never leaks into a neighbouring request, task or thread.
_current: ContextVar[RunningClaim | None] = ContextVar("receipts_running_claim", default=None)


def current() -> RunningClaim | None:
    """The claim the calling code runs under, or None outside any claim."""
    return _current.get()


@contextlib.contextmanager
def running(claim: RunningClaim) -> Iterator[RunningClaim]:
    """Make `claim` current for the block, then put back whatever was current before (a claim
    inside a claim gets its own, and the outer one is current again after it).

    Set and put back by value, not with ContextVar.reset: the view decorator's steps run on
    sync_to_async threads, each in its own copy of the request's context (asgiref copies
    the changes back), where a reset token from the first step would be refused."""
    before = _current.get()
    _current.set(claim)
    try:
        if claim.receipt_id is None:
            yield claim
        else:
            with causing(Cause(RECEIPT, claim.receipt_id, claim.references)):
                yield claim
    finally:
        _current.set(before)
