"""Operator bulk actions (bulk retry, reprocess, requeue) over a filtered set of rows.

Each row goes through the same domain function as a single action, so each gets its own
compare-and-set and audit entry, and a row that changed between the operator's preview
and the action is skipped (counted) rather than overwritten: `each`, and `many`, an
action's bulk form. From the dashboard a bulk action runs in the background as a bulk run
(idemdash/core/bulk_runs.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet

log = logging.getLogger(__name__)

# A bulk run's rows are read when it starts; past this many rows, run it again.
BULK_LIMIT = 5000


@dataclass
class BulkResult:
    done: int = 0
    # Each row the action refused, with why: changed by someone else between the preview and
    # the action (the admin reports each one).
    refused: list[tuple[Any, Exception]] = field(default_factory=list)

    @property
    def skipped(self) -> int:
        return len(self.refused)


def each(
    rows: QuerySet, act: Callable[[Any], object], *, refused: tuple[type[Exception], ...], limit: int = BULK_LIMIT
) -> BulkResult:
    result = BulkResult()
    for row in rows.order_by("id")[:limit].iterator(chunk_size=500):
        try:
            act(row)
        except refused as exc:
            result.refused.append((row, exc))
        else:
            result.done += 1
    return result


def many(
    action: Callable[..., object], where: Q, *, refused: tuple[type[Exception], ...]
) -> Callable[..., BulkResult]:
    """The bulk form of a single-row operator action: `action` for every row of a queryset
    that matches `where` (the rows the action applies to), through `each`. The result is
    called as `action_many(rows, *, actor, user=None, reason="", limit=BULK_LIMIT)`."""

    def action_many(
        rows: QuerySet, *, actor: str, user: Any = None, reason: str = "", limit: int = BULK_LIMIT
    ) -> BulkResult:
        return each(
            rows.filter(where), lambda row: action(row, actor=actor, user=user, reason=reason), refused=refused, limit=limit
        )

    action_many.__name__ = action_many.__qualname__ = f"{action.__name__}_many"
    action_many.__module__ = action.__module__
    action_many.__doc__ = f"`{action.__name__}` for every row of a queryset it applies to, one by one (`bulk.each`)."
    # What a bulk run (`advance`) reads: the rows the action applies to, and what it raises.
    action_many.where = where  # type: ignore[attr-defined]
    action_many.refused = refused  # type: ignore[attr-defined]
    return action_many


