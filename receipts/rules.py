"""The replay rule and the settle rule, each written once.

Three places apply each rule: PostgreSQL's one-statement claim and settle (receipts/pg.py)
embed it as a fragment of SQL, the ORM path (receipts/orm.py) filters with it as a Q, and
the store judges a row it has already read with it in Python (store._claim_once). Written
three times by hand they could drift apart, and the two paths would then answer the same
request differently. So each rule is one small tree of conditions on the receipt's fields,
and the three forms are generated from it. tests/receipts/test_rules.py runs both paths
over every combination of the fields the rules read and checks that they agree."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from receipts.models import Receipt

Status = Receipt.Status


@dataclass(frozen=True)
class Param:
    """A value given when the rule is applied: the caller's fingerprint, the time, a token."""

    name: str


class Condition:
    def sql(self) -> tuple[str, list[str]]:
        """The SQL fragment (one %s per parameter) and the parameters' names in that order."""
        raise NotImplementedError

    def q(self, params: dict[str, Any]) -> Q:
        raise NotImplementedError

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        raise NotImplementedError


def _column(field: str) -> str:
    return Receipt._meta.get_field(field).column


def _value(value: Any, params: dict[str, Any]) -> Any:
    return params[value.name] if isinstance(value, Param) else value


@dataclass(frozen=True)
class Equals(Condition):
    """`field` equals a constant (a status, True, False, None) or a parameter."""

    field: str
    value: Any

    def sql(self) -> tuple[str, list[str]]:
        column = _column(self.field)
        if isinstance(self.value, Param):
            return f"{column} = %s", [self.value.name]
        if self.value is None:
            return f"{column} IS NULL", []
        if isinstance(self.value, bool):
            return (column if self.value else f"NOT {column}"), []
        literal = str(self.value)  # only the constants below: a status
        assert "'" not in literal and "\\" not in literal
        return f"{column} = '{literal}'", []

    def q(self, params: dict[str, Any]) -> Q:
        return Q(**{self.field: _value(self.value, params)})

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        value = _value(self.value, params)
        found = getattr(row, self.field)
        return found is None if value is None else found == value


@dataclass(frozen=True)
class Later(Condition):
    """`field` is after a parameter (a time)."""

    field: str
    than: Param

    def sql(self) -> tuple[str, list[str]]:
        return f"{_column(self.field)} > %s", [self.than.name]

    def q(self, params: dict[str, Any]) -> Q:
        return Q(**{f"{self.field}__gt": params[self.than.name]})

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        return getattr(row, self.field) > params[self.than.name]


@dataclass(frozen=True)
class NotLater(Condition):
    """`field` is set and not after a parameter (a time): NULL never holds, as in SQL."""

    field: str
    than: Param

    def sql(self) -> tuple[str, list[str]]:
        return f"{_column(self.field)} <= %s", [self.than.name]

    def q(self, params: dict[str, Any]) -> Q:
        return Q(**{f"{self.field}__lte": params[self.than.name]})

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        value = getattr(row, self.field)
        return value is not None and value <= params[self.than.name]


@dataclass(frozen=True)
class All(Condition):
    parts: tuple[Condition, ...]

    def sql(self) -> tuple[str, list[str]]:
        return _joined(self.parts, " AND ")

    def q(self, params: dict[str, Any]) -> Q:
        combined = Q()
        for part in self.parts:
            combined &= part.q(params)
        return combined

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        return all(part.holds(row, params) for part in self.parts)


@dataclass(frozen=True)
class Either(Condition):
    parts: tuple[Condition, ...]

    def sql(self) -> tuple[str, list[str]]:
        fragment, names = _joined(self.parts, " OR ")
        return f"({fragment})", names

    def q(self, params: dict[str, Any]) -> Q:
        combined = Q()
        for part in self.parts:
            combined |= part.q(params)
        return combined

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        return any(part.holds(row, params) for part in self.parts)


def _joined(parts: tuple[Condition, ...], operator: str) -> tuple[str, list[str]]:
    fragments, names = [], []
    for part in parts:
        fragment, part_names = part.sql()
        fragments.append(f"({fragment})" if isinstance(part, All) else fragment)
        names += part_names
    return operator.join(fragments), names


@dataclass(frozen=True)
class Rule:
    condition: Condition
    # The SQL fragment and its parameters' names: the same for every use, so built once.
    sql: str = dataclasses.field(init=False)
    names: tuple[str, ...] = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        fragment, names = self.condition.sql()
        object.__setattr__(self, "sql", fragment)
        object.__setattr__(self, "names", tuple(names))

    def arguments(self, **params: Any) -> list[Any]:
        """The values for the SQL fragment's %s, in order."""
        return [params[name] for name in self.names]

    def q(self, **params: Any) -> Q:
        return self.condition.q(params)

    def holds(self, row: Any, **params: Any) -> bool:
        return self.condition.holds(row, params)


# A receipt holds its key until it expires; a permanent one (expires_at NULL: an operation with
# `ttl_seconds: None`) never does. EXPIRED is LIVE's negation, written as the one comparison an
# index on expires_at serves, for the purge and the claim that starts a new life on an expired key.
LIVE = Rule(Either((Equals("expires_at", None), Later("expires_at", than=Param("now")))))

EXPIRED = Rule(NotLater("expires_at", than=Param("now")))

# Settled for good: completed, or failed and not retryable (burned) and not released.
_FINAL = Either((
    Equals("status", Status.COMPLETED),
    All((Equals("status", Status.FAILED), Equals("retryable", False), Equals("released_at", None))),
))

# The stored result answers the request: same fingerprint, live, and completed, or failed and
# not retryable (the key was burned). A released receipt (failed, with the release marker) is
# never replayed: its caller's next attempt runs, and the claim that takes it clears the marker.
REPLAY = Rule(All((Equals("fingerprint", Param("fingerprint")), LIVE.condition, _FINAL)))

# A worker may complete or fail the receipt: its fencing token, and still processing.
SETTLE = Rule(All((Equals("fencing_token", Param("token")), Equals("status", Status.PROCESSING))))

# The fields every freshly claimed receipt starts with, whatever the request (the rest are the
# caller's and the time's): the store's insert on either path, and PostgreSQL's claim
# statement, which writes them as literals.
NEW: dict[str, Any] = {
    "status": Status.PROCESSING.value,
    "retryable": True,
    "response_status": None,
    "response_content_type": "",
    "response_body": "",
    "error": "",
    "fencing_token": 1,
    "attempts": 1,
    "completed_at": None,
    "waiters": False,
    "released_at": None,
    "released_by": "",
    "release_reason": "",
    "compacted_at": None,
}

# A processing receipt whose lease ran out before its attempt settled. The next claim takes it
# over, or, under an operation's `after_crash: "hold"`, answers outcome-unknown: the attempt may
# have had its effect (store._claim_once; the operator's repairs in store.py). PostgreSQL's
# one-statement claim never takes a receipt over; it hands every receipt that does not replay
# to the store, so both paths decide it here.
LAPSED = Rule(
    All((
        Equals("status", Status.PROCESSING),
        Either((Equals("lease_expires_at", None), NotLater("lease_expires_at", than=Param("now")))),
    ))
)
