"""The conflict explorer: what differs between a stored request and a rejected reuse of its key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class Difference:
    path: str  # JSON Pointer (RFC 6901) into the request
    kind: str  # "changed", "added" (only in the rejected request), "removed" (only in the stored)
    stored: Any = None
    rejected: Any = None


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def diff_requests(stored: Any, rejected: Any, path: str = "") -> list[Difference]:
    """Field-by-field differences, leaves only, in document order. Objects are compared key
    by key and arrays index by index, so a changed amount shows as `/amount`, not as "the
    whole body differs". Types that differ are one change."""
    if isinstance(stored, dict) and isinstance(rejected, dict):
        out: list[Difference] = []
        for key in list(stored) + [k for k in rejected if k not in stored]:
            out += _pair(stored.get(key, _MISSING), rejected.get(key, _MISSING), f"{path}/{_escape(str(key))}")
        return out
    if isinstance(stored, list) and isinstance(rejected, list):
        out = []
        for i in range(max(len(stored), len(rejected))):
            a = stored[i] if i < len(stored) else _MISSING
            b = rejected[i] if i < len(rejected) else _MISSING
            out += _pair(a, b, f"{path}/{i}")
        return out
    if stored == rejected and type(stored) is type(rejected):
        return []
    return [Difference(path or "/", "changed", stored, rejected)]


def _pair(a: Any, b: Any, path: str) -> list[Difference]:
    if a is _MISSING:
        return [Difference(path, "added", None, b)]
    if b is _MISSING:
        return [Difference(path, "removed", a, None)]
    return diff_requests(a, b, path)
