"""Operator bulk actions (bulk retry, reprocess, requeue) over a filtered set of rows.

Each row goes through the same domain function as a single action, so each gets its own
compare-and-set and audit entry, and a row that changed between the operator's preview
and the action is skipped (counted) rather than overwritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

# A bulk action runs inside one web request; past this many rows, run it again.
BULK_LIMIT = 5000


@dataclass
class BulkResult:
    done: int = 0
    skipped: int = 0  # changed by someone else between the preview and the action


def each(
    rows: QuerySet, act: Callable[[Any], object], *, refused: tuple[type[Exception], ...], limit: int = BULK_LIMIT
) -> BulkResult:
    result = BulkResult()
    for row in rows.order_by("id")[:limit].iterator(chunk_size=500):
        try:
            act(row)
        except refused:
            result.skipped += 1
        else:
            result.done += 1
    return result
