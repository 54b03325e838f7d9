"""Failures grouped by cause: the cause an error text names, with what varies from one
occurrence to the next masked (ids, numbers, addresses, times), so that 32 dead events from
one handler bug or 26 dead messages from one partner's 403 are one group each. A traceback's
cause is its last line and the innermost frame it was raised in, as Sentry groups them."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, models, transaction
from django.utils import timezone

from idemdash.core import audit
from idemdash.core.caller_text import HIDDEN

CAUSE_LIMIT = 300  # characters of a cause kept: the group's title

# What varies between occurrences of one cause, in the order masked: the longer shapes first,
# so that a number inside an id or a time is not masked on its own.
MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+"), "<email>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"), "<ip>"),
    (re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<hex>"),  # a digest, a token
    # A provider's object id (Stripe's ch_3Nx..., evt_...), or any word mixing letters and
    # at least two digits, such as a key or an order number.
    (re.compile(r"\b[a-z]{1,10}_[A-Za-z0-9]{6,}\b"), "<id>"),
    (re.compile(r"\b(?=[A-Za-z0-9_-]*\d[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{8,}\b"), "<id>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
]
# A traceback's innermost frame: the file and the function the exception was raised in.
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<function>.+)$', re.M)
HTTP_STATUS = re.compile(r"^HTTP (\d{3})\b")


def _storable(text: str) -> str:
    """Text every database stores: no NUL, no lone surrogate (bytes decoded with surrogateescape)."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def masked(text: str) -> str:
    for pattern, mask in MASKS:
        text = pattern.sub(mask, text)
    return text


def cause(error: str) -> str:
    """The cause `error` names, the same for every occurrence of it: a traceback's last line
    and its innermost frame; an HTTP answer's status; otherwise the first line; hidden
    characters dropped (they cannot tell two causes apart for a reader) and masked."""
    text = HIDDEN.sub("", _storable(error)).strip()
    frames = list(FRAME.finditer(text))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "(no error text)"
    where, headline = "", lines[0]
    if frames or headline.startswith("Traceback"):
        headline = lines[-1]  # the exception, below its frames
    if frames:
        path, function = frames[-1]["path"], frames[-1]["function"].strip()
        where = f" in {path.rsplit('/', 1)[-1]}:{function}"
    if status := HTTP_STATUS.match(headline):
        headline = f"HTTP {status[1]}" + masked(headline[status.end():])
    else:
        headline = masked(headline)
    return (headline[: CAUSE_LIMIT - len(where)] + where).strip()



def signature(kind: str, place: str, cause_text: str) -> str:
    """A group's identity: the digest of what it is grouped by, 32 hex characters."""
    return hashlib.sha256(json.dumps([kind, place, cause_text]).encode()).hexdigest()[:32]


SAMPLE_LIMIT = 4000  # characters of the latest failure's error kept as the group's sample
# A group with no new failure for this long is resolved by itself (resolve_quiet); one more
# failure of it reopens it.
QUIET = timedelta(hours=1)


class FailureGroup(models.Model):
    """Failures of one kind of unit at one place (an endpoint's event type, an action's host)
    with one cause: how many, since and until when, the latest as a sample, and whether an
    operator has it in hand. `kind` is the unit's, as idemdash/core/actions.py names it."""

    class State(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    kind = models.CharField(max_length=16)
    signature = models.CharField(max_length=32)
    place = models.CharField(max_length=255, help_text="Where it fails: an endpoint's event type, an action's host.")
    cause = models.CharField(max_length=CAUSE_LIMIT)
    sample = models.TextField(blank=True)
    sample_id = models.BigIntegerField(help_text="The row id of the unit that failed last.")
    failures = models.PositiveIntegerField(default=1)
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.OPEN)
    state_changed_at = models.DateTimeField()
    # Who set the state: an operator, or "" when the group resolved or reopened by itself.
    state_by = models.CharField(max_length=255, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "signature"], name="failure_group_once")]
        indexes = [models.Index(fields=["state", "last_seen"], name="failure_group_state_seen")]

    def __str__(self) -> str:
        return f"{self.place}: {self.cause}"


@dataclass(frozen=True)
class Failure:
    """One failure of a unit of `kind` at `place`, as its group knows it."""

    kind: str
    place: str
    error: str

    @functools.cached_property
    def cause(self) -> str:
        return cause(self.error)

    @functools.cached_property
    def signature(self) -> str:
        return signature(self.kind, self.place, self.cause)


def record(failure: Failure, unit_id: int, now: datetime) -> None:
    """Count one failure in its group, in the caller's transaction (the settle that stores
    the error on the unit, with `failure.signature`): the group made at its first failure,
    or reopened if it was resolved. One statement (an upsert), so that concurrent failures
    of one group each count and none deadlocks."""
    moment = FailureGroup._meta.get_field("last_seen").get_db_prep_value(now, connection)
    with connection.cursor() as c:
        c.execute(_upsert_sql(connection.vendor), [
            failure.kind, failure.signature, _storable(failure.place)[:255], failure.cause,
            _storable(failure.error[:SAMPLE_LIMIT]), unit_id,
            moment, moment, FailureGroup.State.OPEN, moment,
        ])


@functools.cache
def _upsert_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    table = q(FailureGroup._meta.db_table)
    columns = ["kind", "signature", "place", "cause", "sample", "sample_id", "first_seen", "last_seen", "state",
               "state_changed_at"]
    new = "VALUES({})" if vendor == "mysql" else "excluded.{}"
    resolved = f"{table}.{q('state')} = '{FailureGroup.State.RESOLVED}'"
    # `state` last: MySQL assigns left to right, and the CASEs before it read the old state.
    updates = [
        f"{q('failures')} = {table}.{q('failures')} + 1",
        *(f"{q(c)} = {new.format(q(c))}" for c in ("last_seen", "sample", "sample_id")),
        f"{q('state_changed_at')} = CASE WHEN {resolved} THEN {new.format(q('last_seen'))} ELSE {table}.{q('state_changed_at')} END",
        f"{q('state_by')} = CASE WHEN {resolved} THEN '' ELSE {table}.{q('state_by')} END",
        f"{q('state')} = CASE WHEN {resolved} THEN '{FailureGroup.State.OPEN}' ELSE {table}.{q('state')} END",
    ]
    conflict = "ON DUPLICATE KEY UPDATE" if vendor == "mysql" else f"ON CONFLICT ({q('kind')}, {q('signature')}) DO UPDATE SET"
    return (f"INSERT INTO {table} ({', '.join(map(q, columns))}, {q('failures')}, {q('state_by')}) "
            f"VALUES ({', '.join(['%s'] * len(columns))}, 1, '') {conflict} {', '.join(updates)}")


def resolve_quiet(now: datetime) -> int:
    """Resolve the groups with no failure for QUIET: the cause has stopped."""
    return FailureGroup.objects.exclude(state=FailureGroup.State.RESOLVED).filter(last_seen__lt=now - QUIET).update(
        state=FailureGroup.State.RESOLVED, state_changed_at=now, state_by=""
    )


class AlreadyInState(Exception):
    """The group is in that state already (or changed meanwhile): nothing was done."""


def set_state(group: FailureGroup, state: str, *, actor: str, user: Any = None) -> FailureGroup:
    """An operator acknowledges or resolves a group: once, as a compare-and-set on the state
    it was seen in, audited."""
    before = group.state
    if before == state:
        raise AlreadyInState(f"It is {state} already.")
    now = timezone.now()
    with transaction.atomic():
        if not FailureGroup.objects.filter(pk=group.pk, state=before).update(state=state, state_changed_at=now, state_by=actor):
            raise AlreadyInState("It changed meanwhile.")
        audit.record(actor, f"failure_group.{'acknowledge' if state == FailureGroup.State.ACKNOWLEDGED else 'resolve'}",
                     group, status_before=before, status_after=state, detail=str(group), user=user)
    group.refresh_from_db()
    return group
