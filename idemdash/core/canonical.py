"""The server's side of canonical JSON: request fingerprints, and how deep JSON may go.

canonical_json itself (and UnstorableJSON, what it cannot encode) is the client
distribution's (idemdash_client/canonical.py): tool_call_key hashes arguments with it in
workers without Django, and a fingerprint is the same bytes, so there is one implementation."""

from __future__ import annotations

import hashlib
from typing import Any

from idemdash_client.canonical import canonical_json


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
