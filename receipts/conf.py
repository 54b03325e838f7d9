"""Operation policies: how long a receipt lives, how long a lease lasts, what a failure means.

Configured in the `RECEIPTS` setting; every key is optional, so a project that adds the app
gets the defaults below without writing anything.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    "DEFAULT_TTL_SECONDS": 24 * 3600,
    "FINANCIAL_TTL_SECONDS": 7 * 24 * 3600,
    "LEASE_SECONDS": 30,
    "MAX_WAIT_SECONDS": 30,
    "MAX_LEASE_SECONDS": 3600,
    # operation pattern -> {"financial": bool, "ttl_seconds": int, "lease_seconds": int,
    #                       "on_failure": "retry" | "burn"}
    "OPERATIONS": {},
}


def setting(name: str) -> Any:
    return {**DEFAULTS, **getattr(settings, "RECEIPTS", {})}[name]


@dataclass(frozen=True)
class Policy:
    operation: str
    ttl: timedelta
    lease: timedelta
    financial: bool
    burn_on_failure: bool


@lru_cache(maxsize=1024)
def policy_for(operation: str) -> Policy:
    rule: dict[str, Any] = {}
    for pattern, candidate in setting("OPERATIONS").items():
        if fnmatch.fnmatchcase(operation, pattern):
            rule = candidate
            break
    financial = bool(rule.get("financial", False))
    default_ttl = setting("FINANCIAL_TTL_SECONDS") if financial else setting("DEFAULT_TTL_SECONDS")
    on_failure = rule.get("on_failure", "retry")
    if on_failure not in ("retry", "burn"):
        raise ImproperlyConfigured(
            f"RECEIPTS['OPERATIONS'][{operation!r}]['on_failure'] must be 'retry' or 'burn'"
        )
    return Policy(
        operation=operation,
        ttl=timedelta(seconds=int(rule.get("ttl_seconds", default_ttl))),
        lease=timedelta(seconds=int(rule.get("lease_seconds", setting("LEASE_SECONDS")))),
        financial=financial,
        burn_on_failure=on_failure == "burn",
    )


def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == "RECEIPTS":
        policy_for.cache_clear()


setting_changed.connect(_clear_cache)
