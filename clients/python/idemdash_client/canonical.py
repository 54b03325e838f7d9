"""Canonical JSON: the same value gives the same bytes, and the same hash, however it was
serialised. What tool_call_key hashes here, and what the server fingerprints requests with
(idemdash/core/canonical.py:fingerprint_json): one implementation for both."""

from __future__ import annotations

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
