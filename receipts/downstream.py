"""The downstream key: what a claim's holder sends to a provider that honours idempotency
keys (Stripe's `Idempotency-Key`, an email provider's header, an HTTP POST), so that a
re-run of the same claim reaches the provider as the same request (issue 21).

Stable across every attempt of one claim: derived from the receipt's scope, key and the
moment its life began (`created_at`), which a lease takeover or a retry after a failure keeps
and a new life of an expired key changes. Not derived from SECRET_KEY, so rotating it does not
make an in-flight retry look new to the provider; the scope is in it, so two callers' equal
keys never meet at a provider. 40 characters of [0-9a-z_], under every provider's limit
(Stripe's is 255).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

PREFIX = "idem_"


def downstream_key(scope: str, key: str, created_at: datetime) -> str:
    material = "\n".join((scope, key, created_at.isoformat(timespec="microseconds")))
    return PREFIX + hashlib.sha256(material.encode()).hexdigest()[:35]
