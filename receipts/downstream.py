"""The key a claim hands downstream, to a provider that honours idempotency keys: derived from
the receipt's scope, key and created_at, so every attempt of one claim sends the same key
(and the provider makes one effect), and a key's new life after expiry gets a new one."""

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
    """Hashed, so that nothing of the scope reaches the provider; 41 characters, as Square allows 45."""
    # In UTC with microseconds always written, whatever form the database hands back.
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
