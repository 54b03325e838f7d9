"""Counting failures per client address, for the throttle on bad API tokens
(`idemdash/core/clients.py:refused`); the login form's lockout is django-axes', which asks
`client_ip` for the address too, so both agree on who the client is.

Only failures are counted, and only failures are refused: a request that succeeds never
reads or writes the cache. Settings (all optional): `TRUSTED_PROXY_COUNT`,
`API_TOKEN_FAILURE_LIMIT`, `API_TOKEN_FAILURE_WINDOW_SECONDS`, `API_TOKEN_THROTTLE_CACHE`
(docs/operations.md, "Security")."""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import caches
from django.http import HttpRequest

log = logging.getLogger(__name__)

DEFAULTS = {
    "TRUSTED_PROXY_COUNT": 0,
    "API_TOKEN_FAILURE_LIMIT": 20,
    "API_TOKEN_FAILURE_WINDOW_SECONDS": 60,
    "API_TOKEN_THROTTLE_CACHE": "default",
}


def setting(name: str):
    return getattr(settings, name, DEFAULTS[name])


def client_ip(request: HttpRequest) -> str:
    """The client's address: REMOTE_ADDR, or, behind `TRUSTED_PROXY_COUNT` proxies that each
    append the address they saw to X-Forwarded-For, the one the outermost proxy saw. What a
    client wrote into the header itself stays to the left of it and is never read."""
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = setting("TRUSTED_PROXY_COUNT")
    if proxies:
        seen = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
        if len(seen) >= proxies:
            return seen[-proxies]
    return remote


# What django-axes' AccessAttempt and AccessFailureLog hold of a username.
AXES_USERNAME_LENGTH = 255


def login_username(request: HttpRequest, credentials: dict | None) -> str | None:
    """The username django-axes counts a login's failures under (AXES_USERNAME_CALLABLE):
    what was typed, as axes reads it, cut to what its tables hold. Django 6.1's login form
    authenticates a username longer than the user model allows, and axes' own reading
    stored it whole: a 500 (a DataError on PostgreSQL) for a 256-character username."""
    field = getattr(settings, "AXES_USERNAME_FORM_FIELD", "username")
    value = credentials.get(field) if credentials else request.POST.get(field)
    return value[:AXES_USERNAME_LENGTH] if isinstance(value, str) else value


def _address_key(address: str) -> str:
    # An IPv6 client holds a whole /64 and can change its address within it at will.
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address[:64] or "unknown"
    if parsed.version == 4:
        return str(parsed)
    if parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(ipaddress.ip_network(f"{parsed}/64", strict=False))


@dataclass(frozen=True)
class Throttle:
    """At most `limit` failures per address in each window of `window` seconds; past that,
    `fail` says how long to wait, until the window ends.

    Counted in fixed windows, in a Django cache that every web worker shares (the project's:
    the database, or Redis when `REDIS_URL` is set; a host's: the cache its
    `API_TOKEN_THROTTLE_CACHE` names). When the cache is unreachable the throttle lets the
    failure through (it is answered as a failure all the same), logged: a broken cache must
    not become a refusal of good requests."""

    name: str
    limit_setting: str
    window_setting: str
    cache_setting: str

    def fail(self, address: str) -> int:
        """Count one failure from `address`. Returns 0 while within the limit, else the
        seconds until the window ends (for Retry-After); a failure past the limit is not
        counted again, so a refused flood reads the cache but does not write it."""
        limit, window = setting(self.limit_setting), setting(self.window_setting)
        now = time.time()
        number = int(now // window)
        key = f"{self.name}:{_address_key(address)}:{number}"
        retry_after = max(1, math.ceil((number + 1) * window - now))
        try:
            cache = caches[setting(self.cache_setting)]
            if (cache.get(key) or 0) >= limit:
                return retry_after
            # add then incr: the counter exists once, whichever worker counts first.
            cache.add(key, 0, window + 1)
            try:
                count = cache.incr(key)
            except ValueError:  # expired between the two calls: a new window
                cache.add(key, 1, window + 1)
                count = 1
        except Exception:
            log.warning("%s throttle: the cache failed; this failure was not counted", self.name, exc_info=True)
            return 0
        return retry_after if count > limit else 0


BAD_TOKENS = Throttle(
    "bad-token", "API_TOKEN_FAILURE_LIMIT", "API_TOKEN_FAILURE_WINDOW_SECONDS", "API_TOKEN_THROTTLE_CACHE"
)
