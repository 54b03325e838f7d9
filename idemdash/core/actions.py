"""The operator actions on units of work, declared once per kind and read by every front end.

A kind (a receipt, a webhook event, an outbox message) is declared by its own app, in its
`operator_actions.py` (`KINDS`), beside the domain functions its actions call; the core
finds the declarations by module name (idemdash/core/discovery.py), so it imports no app.
The dashboard's one action view and its bulk view, and the apps' admin actions, read the
same specs: the verb, the statuses an action applies to, the domain function and what that
function raises when it refuses. The domain function does the work, with its own
compare-and-set and audit entry (idemdash/core/audit.py:record); nothing here writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Model, Q, QuerySet

from idemdash.core import bulk, tracing
from idemdash.core.discovery import declared_by_apps


@dataclass(frozen=True)
class OperatorAction:
    """One action on one unit: run(obj, *, actor, user, reason[, result]) raises one of
    `refused` when the unit's state (or, a ValueError, the value given) does not allow it."""

    name: str  # e.g. "send_again": its verb, and in URLs and admin actions its name
    applies_to: tuple[str, ...]  # statuses it is offered for
    run: Callable[..., Any]
    refused: tuple[type[Exception], ...]
    explain: str  # what it does, on the confirmation
    # What was done, for the message after it: formatted with the verb, the unit's `label`
    # and its `status` after the action, e.g. "Released {label}: the caller's next attempt will run."
    done: str = "{verb} {label}: it is {status} now."
    danger: bool = False
    # A warning about this unit that makes the confirmation red ("" for none): acting may do
    # harm, e.g. run a charge twice. `note`: what acting does to it, said without alarm.
    caution: Callable[[Any], str] | None = None
    note: Callable[[Any], str] | None = None
    # The label of a value the operator gives beside the reason (a result to store), passed
    # to run() as `result`; "" when the action takes none.
    input: str = ""

    @property
    def verb(self) -> str:
        """The name as the pages and messages say it: "send_again" is "Send again"."""
        return self.name.replace("_", " ").capitalize()

    def perform(self, obj: Any, *, actor: str, user: Any, reason: str = "", **given: Any) -> Any:
        """`run` in a span of its own: what every door (a page, the admin, a bulk run) calls.
        The span names the action and the unit's row id, never the reason or a given value."""
        with tracing.span(OPERATOR_SPAN, {"idemdash.operator.action": self.name, "idemdash.operator.unit_id": str(obj.pk),
                                          "idemdash.operator.unit": obj._meta.label}):
            return self.run(obj, actor=actor, user=user, reason=reason, **given)


OPERATOR_SPAN = "idemdash.operator.action"


@dataclass(frozen=True)
class BulkAction:
    """`action` on every unit of a filtered set that is in `status`: run_many(rows, *, actor,
    user, reason) -> idemdash.core.bulk.BulkResult, one compare-and-set and one audit entry
    (`audit_action`) per row."""

    action: OperatorAction
    status: str
    noun: str  # one row, e.g. "failed receipt"
    done: str  # e.g. "Released"
    run_many: Callable[..., Any]
    audit_action: str
    explain: str
    # The statuses in which a row the action was done on has its outcome (a message sent
    # again: sent or dead); a bulk run's summary follows each row until it gets there. Empty
    # when the action's own change is the outcome (a release).
    settles: tuple[str, ...] = ()

    @property
    def verb(self) -> str:
        return self.action.verb


@dataclass(frozen=True)
class Kind:
    name: str  # "receipt", "event", "message"
    model: type[Model]
    row_key: Callable[[Any], str]  # what names a row in a list: its key, an event's id
    actions: tuple[OperatorAction, ...]
    bulk: BulkAction | None = None
    label_prefix: str = ""  # before the row's key in a sentence: "event evt_1"
    related: tuple[str, ...] = field(default=())  # select_related when a unit is loaded
    # Will retrying help? `lasting(unit)` says why the unit's last failure would come back on
    # every retry ("" when it may not), and `lasting_where()` picks such units in SQL, for a
    # bulk confirmation's count. Each kind's domain module defines the pair, and its tests
    # hold the two to the same answer.
    lasting: Callable[[Any], str] | None = None
    lasting_where: Callable[[], Q] | None = None

    def action(self, name: str) -> OperatorAction | None:
        return next((action for action in self.actions if action.name == name), None)

    def label(self, obj: Any) -> str:
        return f"{self.label_prefix}{self.row_key(obj)}"

    def lasting_failure(self, unit: Any) -> str:
        return self.lasting(unit) if self.lasting else ""

    def lasting_count(self, units: QuerySet) -> int:
        return units.filter(self.lasting_where()).count() if self.lasting_where else 0

    def units(self) -> QuerySet:
        units = self.model._default_manager.all()
        # Without names, select_related() means every non-null foreign key (deprecated in
        # Django 6.1), not none.
        return units.select_related(*self.related) if self.related else units


def kinds() -> dict[str, Kind]:
    """Every installed app's kinds (`<app>/operator_actions.py:KINDS`), by name."""
    return {kind.name: kind for kind in declared_by_apps("operator_actions", "KINDS")}


def kind(name: str) -> Kind:
    return kinds()[name]


def shown_status(obj: Any) -> str:
    """The status an operator reads (a released receipt reads "released")."""
    return getattr(obj, "shown_status", obj.status)


def act_on_each(
    rows: QuerySet, action: OperatorAction, *, actor: str, user: Any, reason: str = "", **given: Any
) -> tuple[int, list[tuple[Any, Exception]]]:
    """`action` on each of `rows` (an admin's selection), through the bulk actions' loop
    (idemdash/core/bulk.py:each): how many were done, and each row it refused with why. A
    refused row does not stop the others. `given` is the value the action takes (`result`
    for one with an `input`)."""
    result = bulk.each(rows, lambda row: action.perform(row, actor=actor, user=user, reason=reason, **given),
                       refused=action.refused)
    return result.done, result.refused
