"""Secrets masked by kind, in one place, for everything people read: pages, the admin and
log lines.

Two kinds of secret hide in values we show: the userinfo of a URL
(`https://user:password@host/` becomes `https://••••@host/`), wherever a URL appears in text
(a payload, an error message, httpx's own log line of every request's URL); and the value of
a header whose name says it is a credential (`is_secret_header`: a name holding any of
`RECEIPTS_MASKED_HEADERS`, case-insensitive, whose default is `DEFAULT_MASKED_HEADERS`)."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

MASK = "••••"

# Parts of a header name that mark its value as a credential. `auth` covers Authorization,
# Proxy-Authorization and the X-Auth-* family; `key` covers X-Api-Key and the like.
DEFAULT_MASKED_HEADERS = (
    "auth", "token", "secret", "key", "cookie", "signature", "password", "passwd", "session", "credential",
    "jwt", "bearer", "private",
)

# scheme://userinfo@ : userinfo runs to the first `@` before any `/`, `?`, `#` or space.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#@\s]+@")


def mask_text(text: str) -> str:
    """`text` with the userinfo of every URL in it masked."""
    if "@" not in text:  # the common case, and cheap: no regex for most log lines
        return text
    return _USERINFO.sub(lambda m: m["scheme"] + MASK + "@", text)


def masked_header_words() -> tuple[str, ...]:
    words = getattr(settings, "RECEIPTS_MASKED_HEADERS", DEFAULT_MASKED_HEADERS)
    if isinstance(words, str) or not all(isinstance(w, str) and w for w in words):
        raise ImproperlyConfigured("RECEIPTS_MASKED_HEADERS must be a list of non-empty strings.")
    return tuple(w.lower() for w in words)


def is_secret_header(name: str, words: tuple[str, ...] | None = None) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in (words if words is not None else masked_header_words()))


def masked(value: Any, *, _words: tuple[str, ...] | None = None) -> Any:
    """A JSON value as people see it: URL userinfo masked in every string, and in any object
    named `headers`, the values of credential headers."""
    words = _words if _words is not None else masked_header_words()
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, list):
        return [masked(item, _words=words) for item in value]
    if isinstance(value, dict):
        out = {}
        for name, item in value.items():
            if name.lower() == "headers" and isinstance(item, dict):
                item = {h: MASK if is_secret_header(h, words) else masked(v, _words=words) for h, v in item.items()}
            else:
                item = masked(item, _words=words)
            out[mask_text(name) if isinstance(name, str) else name] = item
        return out
    return value


class MaskingFilter(logging.Filter):
    """Masks URL userinfo in a record's message (its arguments merged in first). The
    project's LOGGING puts it on its handler; the outbox app puts it on the `httpx` logger
    (`mask_logger`), so a host project's logs are masked too."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken record is logging's to report, not ours
            return True
        safe = mask_text(message)
        if safe != message:
            record.msg, record.args = safe, None
        return True


def mask_logger(name: str) -> None:
    """Put one MaskingFilter on the logger `name` (once, however often called)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, MaskingFilter) for f in logger.filters):
        logger.addFilter(MaskingFilter())
