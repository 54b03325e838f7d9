"""Canonical JSON: the same value gives the same bytes, and the same hash, however it was
serialised; and the JSON that cannot be encoded again, so neither hashed nor stored."""

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


# The deepest JSON taken in (a request body, a webhook payload): well within what Python
# can walk and encode again, far beyond what any real document needs.
MAX_JSON_DEPTH = 64
# MariaDB checks every JSON column with JSON_VALID, which refuses 32 levels and deeper: there
# the limit is lower, so a deep body is a 400 up front rather than a refused insert.
MARIADB_JSON_DEPTH = 31


def json_depth_limit() -> int:
    """The deepest JSON the default database can store: MAX_JSON_DEPTH, or less on MariaDB."""
    from django.db import connection

    if connection.vendor == "mysql" and connection.mysql_is_mariadb:
        return MARIADB_JSON_DEPTH
    return MAX_JSON_DEPTH


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
