"""The receipts' rules (expiry, replay, settle, lapse), each written once as a small tree of
conditions on the receipt's fields, from which its three forms are generated: a fragment of
SQL for PostgreSQL's statements (receipts/pg.py), a Q for the ORM path (receipts/orm.py), and
a Python predicate for a row already read (store._claim_once). So the two paths cannot drift
apart; tests/receipts/test_rules.py checks that they agree over every combination."""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

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


# A comparison with a time: its SQL operator, Django lookup and Python predicate.
_COMPARISONS = {"gt": (">", operator.gt), "lte": ("<=", operator.le)}


@dataclass(frozen=True)
class Compared(Condition):
    """`field` is set and after a time (`gt`) or not after it (`lte`); NULL never holds, as in SQL."""

    field: str
    lookup: str
    than: Param

    def sql(self) -> tuple[str, list[str]]:
        return f"{_column(self.field)} {_COMPARISONS[self.lookup][0]} %s", [self.than.name]

    def q(self, params: dict[str, Any]) -> Q:
        return Q(**{f"{self.field}__{self.lookup}": params[self.than.name]})

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        value = getattr(row, self.field)
        return value is not None and _COMPARISONS[self.lookup][1](value, params[self.than.name])


@dataclass(frozen=True)
class All(Condition):
    """Every part holds; `Either`: one of them does."""

    parts: tuple[Condition, ...]
    joiner: ClassVar[str] = " AND "
    combine: ClassVar[Callable[[Q, Q], Q]] = operator.and_
    decide: ClassVar[Callable[[Any], bool]] = all

    def sql(self) -> tuple[str, list[str]]:
        fragments, names = [], []
        for part in self.parts:
            fragment, part_names = part.sql()
            fragments.append(f"({fragment})" if type(part) is All else fragment)
            names += part_names
        return self.joiner.join(fragments), names

    def q(self, params: dict[str, Any]) -> Q:
        return functools.reduce(type(self).combine, (part.q(params) for part in self.parts), Q())

    def holds(self, row: Any, params: dict[str, Any]) -> bool:
        return type(self).decide(part.holds(row, params) for part in self.parts)


class Either(All):
    joiner = " OR "
    combine = operator.or_
    decide = any

    def sql(self) -> tuple[str, list[str]]:
        fragment, names = super().sql()
        return f"({fragment})", names


@dataclass(frozen=True)
class Rule:
    condition: Condition
    # Built once: the same for every use.
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


# A receipt holds its key until it expires, a permanent one (expires_at NULL) for ever. EXPIRED
# is LIVE's negation as the one comparison an index on expires_at serves.
LIVE = Rule(Either((Equals("expires_at", None), Compared("expires_at", "gt", than=Param("now")))))

EXPIRED = Rule(Compared("expires_at", "lte", than=Param("now")))

# Settled for good: completed, or failed and not retryable (burned) and not released.
_FINAL = Either((
    Equals("status", Status.COMPLETED),
    All((Equals("status", Status.FAILED), Equals("retryable", False), Equals("released_at", None))),
))

# The stored result answers the request: same fingerprint, live, and final. A released receipt
# is never replayed: its caller's next attempt runs, and that claim clears the marker.
REPLAY = Rule(All((Equals("fingerprint", Param("fingerprint")), LIVE.condition, _FINAL)))

# A worker may complete or fail the receipt: its fencing token, and still processing.
SETTLE = Rule(All((Equals("fencing_token", Param("token")), Equals("status", Status.PROCESSING))))

# The fields every freshly claimed receipt starts with, whatever the request.
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

# A processing receipt whose lease ran out before its attempt settled: the next claim takes it
# over, or under `after_crash: "hold"` answers outcome-unknown (store._claim_once, on both paths).
LAPSED = Rule(
    All((
        Equals("status", Status.PROCESSING),
        Either((Equals("lease_expires_at", None), Compared("lease_expires_at", "lte", than=Param("now")))),
    ))
)
