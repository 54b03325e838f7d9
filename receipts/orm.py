"""The twin of receipts/pg.py through the plain ORM, for every other database. Where
PostgreSQL does in one statement what the store otherwise does step by step, it returns None."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from receipts import rules, waiting
from receipts.models import Attempt, Receipt


def claim_or_replay(values: dict[str, Any], now: datetime, spent_ms: float) -> None:
    """Nothing in one statement: the store inserts or decides about the existing receipt."""
    return None


def settle(scope: str, key: str, token: int, outcome: str, detail: str, now: datetime, changes: dict[str, Any]) -> bool:
    """The fenced UPDATE, its log line, and the waiters woken at commit; False if it matched nothing."""
    updated = Receipt.objects.filter(rules.SETTLE.q(token=token), scope=scope, key=key).update(
        updated_at=now, lease_expires_at=None, **changes
    )
    if updated:
        log_settle(scope, key, token, outcome, detail, now)
        notify(scope, key)
    return bool(updated)


def log_settle(scope: str, key: str, token: int, outcome: str, detail: str, now: datetime | None = None) -> None:
    """A settle's line in the attempt log (this path's settles, and both paths' stale ones)."""
    receipt = Receipt.objects.filter(scope=scope, key=key).only("id", "operation").first()
    Attempt.objects.create(
        receipt=receipt,
        scope=scope,
        key=key,
        operation=receipt.operation if receipt else "",
        outcome=outcome,
        fencing_token=token,
        detail=detail,
        created_at=now or timezone.now(),
    )


def announce_waiter(receipt: Receipt) -> bool:
    """Nothing to ask for: this path's settle always wakes the waiters."""
    return True


def notify(scope: str, key: str) -> None:
    """Wake this process's waiters of the key at commit; others' see it on their timer."""
    waiting.wake_on_commit(scope, key)


def purge_expired_receipts(due: QuerySet, now: datetime, batch_size: int) -> None:
    """Nothing in one statement: the generic batch (due, archive, delete_rows) does it."""
    return None
