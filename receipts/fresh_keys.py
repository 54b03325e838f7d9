"""Retries under a fresh key: the same caller's same request under a new Idempotency-Key
within RECEIPTS_FRESH_KEY_WINDOW_SECONDS. Counted from the receipts when read (the claim pays
nothing); under "fresh_key": "refuse" the claim asks `first_use`, whose unique FirstKey row
lets exactly one of two racing copies run."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q, Window
from django.db.models.functions import Lag
from django.utils import timezone

from receipts.conf import setting
from receipts.models import Attempt, FirstKey, Receipt


def window() -> timedelta:
    return timedelta(seconds=setting("RECEIPTS_FRESH_KEY_WINDOW_SECONDS"))


def _digest(receipt: Receipt) -> str:
    # NUL cannot occur in a scope, an operation or a fingerprint: the parts never run together.
    return hashlib.sha256("\0".join((receipt.scope, receipt.operation, receipt.fingerprint)).encode()).hexdigest()


def first_use(receipt: Receipt, now: datetime) -> Receipt | None:
    """For a receipt just claimed, in the claim's transaction: the receipt of another key of the
    window that made its request, else None (this key is now the one). A stale row gives way."""
    digest = _digest(receipt)
    for _ in range(50):  # each lost race means another claim changed the row, which we read again
        try:
            with transaction.atomic():
                FirstKey.objects.create(digest=digest, receipt_id=receipt.pk, key=receipt.key, created_at=now)
            return None
        except IntegrityError:
            pass
        # Locking: on MySQL/MariaDB a plain read would see this transaction's snapshot.
        row = FirstKey.objects.select_for_update().filter(digest=digest).first()
        if row is None:
            continue  # purged since our insert
        if row.key != receipt.key and row.created_at >= now - window():
            earlier = Receipt.objects.filter(
                pk=row.receipt_id, scope=receipt.scope, operation=receipt.operation, fingerprint=receipt.fingerprint
            ).first()
            if earlier is not None:
                return earlier
        if FirstKey.objects.filter(pk=row.pk, receipt_id=row.receipt_id, created_at=row.created_at).update(
            receipt_id=receipt.pk, key=receipt.key, created_at=now
        ):
            return None
    raise RuntimeError(f"the first use of {receipt.scope}/{receipt.key}'s request lost 50 races")  # pragma: no cover


def due_first_keys(now: datetime) -> Any:
    """Rows past the window, for the purge: they can only give way."""
    return FirstKey.objects.filter(created_at__lt=now - window())


def _previous(field: str) -> Window:
    """The `field` of the receipt before, among the same caller's receipts of the same request."""
    return Window(Lag(field), partition_by=[F("scope"), F("operation"), F("fingerprint")],
                  order_by=[F("created_at").asc(), F("id").asc()])


def retries(since: datetime, now: datetime | None = None) -> list[dict[str, Any]]:
    """The fresh-key retries since `since`, oldest first, from the receipts still kept and the
    refusals' lines in the attempt log: each `key` with the `first_key` it repeated, the `gap`
    between them, and whether it was `refused`."""
    now = now or timezone.now()
    span = window()
    # Filtered on the window functions, so only retries come back; `since` is applied here,
    # as a plain filter would hide the receipts before it from the look-back.
    kept = Receipt.objects.filter(created_at__gte=since - span, created_at__lte=now).annotate(
        previous=_previous("created_at"), previous_key=_previous("key"), previous_id=_previous("id"),
    ).filter(previous__gte=F("created_at") - span).values(
        "id", "scope", "key", "operation", "created_at", "previous", "previous_key", "previous_id")
    found = [{"at": row["created_at"], "operation": row["operation"], "scope": row["scope"], "key": row["key"],
              "receipt_id": row["id"], "first_key": row["previous_key"], "first_receipt_id": row["previous_id"],
              "refused": False, "gap": (row["created_at"] - row["previous"]).total_seconds()}
             for row in kept if row["created_at"] >= since]
    refused = list(Attempt.objects.filter(outcome=Attempt.Outcome.FRESH_KEY_RETRY, created_at__gte=since,
                                          created_at__lte=now).values("created_at", "operation", "scope", "key", "receipt_id"))
    firsts = {pk: (key, at) for pk, key, at in Receipt.objects.filter(
        pk__in={r["receipt_id"] for r in refused}).values_list("pk", "key", "created_at")}
    for line in refused:
        first_key, first_at = firsts.get(line["receipt_id"], ("", None))
        found.append({"at": line["created_at"], "operation": line["operation"], "scope": line["scope"],
                      "key": line["key"], "receipt_id": None, "first_key": first_key,
                      "first_receipt_id": line["receipt_id"], "refused": True,
                      "gap": None if first_at is None else (line["created_at"] - first_at).total_seconds()})
    return sorted(found, key=lambda r: r["at"])


def recent(limit: int = 20) -> list[dict[str, Any]]:
    """The latest fresh-key retries of the last day, newest first, for the Coverage page."""
    return retries(timezone.now() - timedelta(hours=24))[::-1][:limit]


def counts(since: datetime, now: datetime | None = None) -> dict[str, dict[str, int]]:
    """Per operation, the fresh-key retries since `since`, `allowed` and `refused`."""
    found: dict[str, dict[str, int]] = {}
    for retry in retries(since, now):
        found.setdefault(retry["operation"], {"allowed": 0, "refused": 0})["refused" if retry["refused"] else "allowed"] += 1
    return found


def same_request(receipt: Receipt) -> list[dict[str, Any]]:
    """The caller's other keys of the window that made this receipt's request, nearest first."""
    span = window()
    others = Receipt.objects.filter(
        ~Q(pk=receipt.pk), scope=receipt.scope, operation=receipt.operation, fingerprint=receipt.fingerprint,
        created_at__gte=receipt.created_at - span, created_at__lte=receipt.created_at + span,
    ).values("pk", "key", "created_at")[:20]
    found = [{"key": o["key"], "receipt_id": o["pk"], "earlier": o["created_at"] < receipt.created_at,
              "seconds": round(abs((o["created_at"] - receipt.created_at).total_seconds()), 1)} for o in others]
    return sorted(found, key=lambda o: o["seconds"])
