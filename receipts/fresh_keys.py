"""Retries under a fresh key: the same caller's same request (scope, operation, fingerprint)
under a new Idempotency-Key within RECEIPTS_FRESH_KEY_WINDOW_SECONDS, as a client sends that
timed out and minted a new key. Counted from the receipts when read (`counts`, `same_request`:
the claim pays nothing); an operation with "fresh_key": "refuse" asks `first_use` in its
claim's transaction, whose unique FirstKey row per request lets exactly one of two racing
copies run, and the other is answered 409 fresh-key-retry naming the key already used."""

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
    """For a receipt just claimed under a new key, in the claim's transaction: None when no
    other key of the window made its request (this key is now the one that did), else the
    receipt of the key that did. A row older than the window, of this very key, or whose
    receipt is gone or holds another request now, gives way."""
    digest = _digest(receipt)
    for _ in range(50):  # each lost race means another claim changed the row, which we read again
        try:
            with transaction.atomic():
                FirstKey.objects.create(digest=digest, receipt_id=receipt.pk, key=receipt.key, created_at=now)
            return None
        except IntegrityError:
            pass
        # A locking read: on MySQL/MariaDB a plain one would read this transaction's snapshot.
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


def _with_previous(receipts: Any) -> Any:
    """Each receipt with `previous`: when the same caller last made its request to its operation."""
    return receipts.annotate(previous=Window(
        Lag("created_at"), partition_by=[F("scope"), F("operation"), F("fingerprint")],
        order_by=[F("created_at").asc(), F("id").asc()]))


def counts(since: datetime, now: datetime | None = None) -> dict[str, dict[str, int]]:
    """Per operation, the fresh-key retries since `since`: `allowed` (a receipt whose request
    the same caller made under another key within the window before) and `refused`."""
    now = now or timezone.now()
    span = window()
    found: dict[str, dict[str, int]] = {}
    rows = _with_previous(Receipt.objects.filter(created_at__gte=since - span, created_at__lte=now)).values(
        "operation", "created_at", "previous").iterator()
    for row in rows:
        if row["created_at"] >= since and row["previous"] is not None and row["created_at"] - row["previous"] <= span:
            found.setdefault(row["operation"], {"allowed": 0, "refused": 0})["allowed"] += 1
    refused = Attempt.objects.filter(outcome=Attempt.Outcome.FRESH_KEY_RETRY, created_at__gte=since, created_at__lte=now)
    for operation in refused.values_list("operation", flat=True).iterator():
        found.setdefault(operation, {"allowed": 0, "refused": 0})["refused"] += 1
    return found


def same_request(receipt: Receipt) -> list[dict[str, Any]]:
    """The caller's other keys of the window before and after this receipt that made its
    request, nearest first: each `key`, `receipt_id`, `seconds` apart and whether `earlier`."""
    span = window()
    others = Receipt.objects.filter(
        ~Q(pk=receipt.pk), scope=receipt.scope, operation=receipt.operation, fingerprint=receipt.fingerprint,
        created_at__gte=receipt.created_at - span, created_at__lte=receipt.created_at + span,
    ).values("pk", "key", "created_at")[:20]
    found = [{"key": o["key"], "receipt_id": o["pk"], "earlier": o["created_at"] < receipt.created_at,
              "seconds": round(abs((o["created_at"] - receipt.created_at).total_seconds()), 1)} for o in others]
    return sorted(found, key=lambda o: o["seconds"])
