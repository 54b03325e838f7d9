"""The key a claim hands downstream: what a step sends to a provider that honours
idempotency keys (Stripe's `idempotency_key`, an email API's Idempotency-Key header).

Derived from the receipt's scope, key and created_at, so it is the same for every attempt of
one claim: a retry after a failure, or the attempt that takes over a lapsed lease after a
crash, sends the key the crashed attempt sent, and the provider answers it with the effect
it already made instead of making a second. A receipt that expired and is claimed anew starts
a new life with a new created_at, and so a new downstream key: it is a new intent."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from idemdash_client.context import RunningClaim

if TYPE_CHECKING:
    from receipts.models import Receipt

PREFIX = "idemdash-"


def downstream_key(scope: str, key: str, created_at: datetime) -> str:
    """Hashed so that nothing of the caller's scope (a user id, an API client's name) reaches
    the provider, and short (41 characters) so that every provider takes it: Stripe allows
    255, Square 45."""
    # Microseconds always written, in UTC: every database hands created_at back as the same
    # instant, with or without a fraction of a second, and the text must not vary with it.
    moment = created_at.astimezone(UTC).isoformat(timespec="microseconds")
    material = json.dumps([scope, key, moment], separators=(",", ":")).encode()
    return PREFIX + hashlib.sha256(material).hexdigest()[:32]


def running_claim(receipt: Receipt, token: int) -> RunningClaim:
    """What `receipts.current()` gives while the attempt holding `token` runs."""
    return RunningClaim(
        key=receipt.key,
        scope=receipt.scope,
        operation=receipt.operation,
        fencing_token=token,
        attempt=receipt.attempts,
        downstream_key=downstream_key(receipt.scope, receipt.key, receipt.created_at),
        receipt_id=receipt.pk,
    )
