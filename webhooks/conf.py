"""The webhooks app's settings: flat `WEBHOOKS_*` names (and the three provider secrets) in
the host project's settings, read through `setting(name)`. Each is optional: a project that
installs the app gets these defaults."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # A secret set here creates the endpoint /webhooks/<provider>/ (webhooks.endpoints).
    "STRIPE_WEBHOOK_SECRET": "",
    "SHOPIFY_WEBHOOK_SECRET": "",
    "STANDARD_WEBHOOK_SECRET": "",
    "WEBHOOKS_MAX_BODY_BYTES": 1024 * 1024,
    "WEBHOOKS_STRIPE_TOLERANCE": 300,
    "WEBHOOKS_MAX_ATTEMPTS": 8,
    "WEBHOOKS_BACKOFF_BASE": 30,
    "WEBHOOKS_BACKOFF_CAP": 6 * 3600,
    # Longer than django-q2's task timeout (60 s in idemdash's Q_CLUSTER): a task the
    # cluster has not yet killed still owns its event.
    "WEBHOOKS_LEASE_SECONDS": 20,
    "WEBHOOKS_REQUEUE_AFTER_SECONDS": 120,
    "WEBHOOKS_REQUEUE_IDLE_SECONDS": 15,
    "WEBHOOKS_EVENT_RETENTION_DAYS": 30,
    "WEBHOOKS_REJECTED_RETENTION_DAYS": 7,
    "WEBHOOKS_ROLLUP_RETENTION_DAYS": 90,
    "WEBHOOKS_REJECTED_MAX_ROWS": 10_000,
}


def setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
