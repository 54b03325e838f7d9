"""Outbox settings. Each is optional: a project that installs the app gets these defaults."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Whether this project's worker drains the outbox (receipts/outbox/tasks.py); off for
    # a project beside another that drains the same table (idemdash as a separate service).
    "OUTBOX_DRAIN": True,
    "OUTBOX_MAX_ATTEMPTS": 10,
    "OUTBOX_BACKOFF_BASE_SECONDS": 2,
    "OUTBOX_BACKOFF_CAP_SECONDS": 3600,
    "OUTBOX_LEASE_SECONDS": 20,
    "OUTBOX_BATCH_SIZE": 20,
    "OUTBOX_HTTP_TIMEOUT_SECONDS": 10,
    "OUTBOX_HTTP_ALLOWED_HOSTS": [],  # empty: any host, at public addresses only (fence.py)
    "OUTBOX_DRAIN_SECONDS": 45,
    "OUTBOX_SENT_RETENTION_DAYS": 7,
    "OUTBOX_DEAD_RETENTION_DAYS": 30,
    "OUTBOX_ATTEMPT_RETENTION_DAYS": 35,
    # Read by the roll-ups themselves (idemdash/core/rollup.py, its RETENTION_DAYS); here so
    # that every OUTBOX_* setting has its default in this table.
    "OUTBOX_MESSAGE_ROLLUP_RETENTION_DAYS": 90,
    "OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS": 90,
}

# A server may ask for a long pause (Retry-After), but not for one longer than a day.
RETRY_AFTER_MAX_SECONDS = 24 * 3600


def setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
