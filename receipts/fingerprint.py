"""Request fingerprints: the same intent must hash the same however it is serialised."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785


class UnstorableJSON(ValueError):
    """Parsed JSON that cannot be encoded as UTF-8 JSON again, so neither hashed nor stored:
    a lone UTF-16 surrogate (`"\\ud800"`, or its raw bytes, which Python's parser lets
    through) is not Unicode text, and NaN, Infinity or a number beyond a double's range (read
    as infinity) are not JSON; PostgreSQL's jsonb and text refuse them, SQLite's driver
    refuses the surrogate."""


def canonical_json(value: Any) -> bytes:
    """RFC 8785 (JCS) bytes: key order and whitespace do not change the result.

    JCS refuses some values JSON allows (integers beyond 2**53); those fall back to a
    sorted, compact dump, which is still stable for one value. Raises UnstorableJSON for
    what neither can encode; found only on this failure path, so valid JSON pays nothing.
    """
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        pass
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except UnicodeEncodeError:
        raise UnstorableJSON("A string holds a lone UTF-16 surrogate (such as \\ud800): it is not Unicode text.") from None
    except ValueError:
        raise UnstorableJSON("A number is NaN, Infinity or beyond the range of a double.") from None


def fingerprint_json(value: Any) -> str:
    return hashlib.sha256(canonical_json(value)).hexdigest()


def fingerprint_http(method: str, path: str, body: bytes, content_type: str) -> str:
    """method + path + body, the body canonicalised when it is JSON and hashed raw otherwise."""
    digest = hashlib.sha256()
    digest.update(method.upper().encode() + b"\n" + path.encode() + b"\n")
    parsed = parse_json_body(body, content_type)
    canonical = None
    if parsed is not _NOT_JSON:
        try:
            canonical = canonical_json(parsed)
        except RecursionError:
            pass  # nested too deep to canonicalise: the raw bytes still identify it
    if canonical is not None:
        digest.update(b"json\n" + canonical)
    else:
        digest.update(b"raw\n" + body)
    return digest.hexdigest()


_NOT_JSON = object()
MAX_JSON_DEPTH = 64


def parse_json_body(body: bytes, content_type: str) -> Any:
    if not body or "json" not in (content_type or "").lower():
        return _NOT_JSON
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: a client's deeply nested body must not become a 500.
        return _NOT_JSON
    # Python parses deeper JSON than it can walk or encode again (to canonicalise or store
    # it): such a body is treated as opaque bytes, for the fingerprint and the stored request alike.
    return _NOT_JSON if nesting_depth(parsed) > MAX_JSON_DEPTH else parsed


def nesting_depth(value: Any) -> int:
    """How deep parsed JSON goes (a scalar is 0, `[1]` is 1), counted without recursion:
    Python parses deeper JSON than it can encode again, so callers refuse deep values
    before they are canonicalised or stored."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return deepest


def is_json(value: Any) -> bool:
    return value is not _NOT_JSON
