"""References: what a unit of work says it worked on (a Stripe charge, an order), and the
cause an outbox message records when it is enqueued while a unit runs.

    receipts.current().refer("stripe.charge", charge.id)     # under a claim
    event.refer("stripe.charge", charge.id)                  # in a webhook handler

A reference is (kind, value): `kind` a short token naming what the value is, `value` the id
as the other system prints it. Imports no Django: `receipts.context` (which the HTTP client
shares) builds on it."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

KIND_RE = re.compile(r"^[a-z0-9][a-z0-9_.:\-]{0,63}$")
VALUE_MAX = 255
# Per unit of work (an attempt, an event's processing, a message): references are what it
# worked on, a handful, not a log.
MAX_PER_OBJECT = 20

KIND_RULE = "A kind is 1 to 64 characters of lowercase letters, digits and . _ : - (such as stripe.charge)."
VALUE_RULE = (
    f"A value is 1 to {VALUE_MAX} printable characters, without leading or trailing spaces "
    "(no control, format or bidirectional characters)."
)
LIMIT_RULE = f"At most {MAX_PER_OBJECT} references per object."

RECEIPT = "receipt"
WEBHOOK_EVENT = "webhook_event"


class InvalidReference(ValueError):
    """A reference refused by its kind, value, or the limit per object; `field` names which."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field


def validate(kind: object, value: object) -> tuple[str, str]:
    """(kind, value) when both follow the rules, else InvalidReference. An int value (an
    order number) is taken as its text."""
    if not isinstance(kind, str) or not KIND_RE.fullmatch(kind):
        raise InvalidReference("kind", KIND_RULE)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    # isprintable() is False for control (Cc), format (Cf: the bidi controls, zero-width
    # characters), surrogate and unassigned code points, and every separator but the space:
    # text that could hide or reorder what an operator reads.
    if (
        not isinstance(value, str)
        or not 1 <= len(value) <= VALUE_MAX
        or not value.isprintable()
        or value != value.strip()
    ):
        raise InvalidReference("value", VALUE_RULE)
    return kind, value


def validate_all(references: Iterable[object]) -> list[tuple[str, str]]:
    """A list of {"kind": ..., "value": ...} (the JSON API's form) or (kind, value) pairs,
    each checked, duplicates dropped, at most MAX_PER_OBJECT."""
    seen: dict[tuple[str, str], None] = {}
    for item in references:
        if isinstance(item, dict):
            if set(item) != {"kind", "value"}:
                raise InvalidReference("references", 'Each reference is an object {"kind": ..., "value": ...}.')
            pair = validate(item["kind"], item["value"])
        elif isinstance(item, tuple) and len(item) == 2:
            pair = validate(*item)
        else:
            raise InvalidReference("references", 'Each reference is an object {"kind": ..., "value": ...}.')
        seen[pair] = None
        if len(seen) > MAX_PER_OBJECT:
            raise InvalidReference("references", LIMIT_RULE)
    return list(seen)


@dataclass
class References:
    """The references one unit of work gathered while it ran, in order, without repeats. Kept
    in memory and written by whoever settles the unit, in the settle's own transaction
    (receipts/store.py, webhooks/processing.py), so they commit exactly when the outcome they
    describe does; an attempt that crashes, or loses its lease, leaves none."""

    items: list[tuple[str, str]] = field(default_factory=list)

    def refer(self, kind: str, value: str | int) -> None:
        pair = validate(kind, value)
        if pair in self.items:
            return
        if len(self.items) >= MAX_PER_OBJECT:
            raise InvalidReference("references", LIMIT_RULE)
        self.items.append(pair)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.items)


@dataclass
class Cause:
    """A unit of work running now: what an outbox message enqueued meanwhile records as its
    cause, and where `refer` puts references. What runs now is the innermost one (a
    receipt's attempt, a webhook event's processing): `causing` makes one current for a block."""

    kind: str  # RECEIPT or WEBHOOK_EVENT
    id: int
    references: References = field(default_factory=References)


_cause: ContextVar[Cause | None] = ContextVar("idemdash_running_cause", default=None)


def cause() -> Cause | None:
    """The innermost unit of work the calling code runs under, or None."""
    return _cause.get()


@contextlib.contextmanager
def causing(running: Cause) -> Iterator[Cause]:
    """Make `running` the cause for the block, then put back the one before (set and put back
    by value, as receipts.context.running does, for the same reason)."""
    before = _cause.get()
    _cause.set(running)
    try:
        yield running
    finally:
        _cause.set(before)
