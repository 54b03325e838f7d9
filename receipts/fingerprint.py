"""Request fingerprints: the same intent must hash the same however it is serialised
(the JSON canonicalised by `idemdash.core.canonical`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from idemdash.core.canonical import MARIADB_JSON_DEPTH, json_depth_limit, nesting_depth
from idemdash_client.canonical import canonical_json


_UNPARSED = object()  # the caller has not parsed the body (a parsed `null` body is None)


def fingerprint_http(method: str, path: str, body: bytes, content_type: str, parsed: Any = _UNPARSED) -> str:
    """method + path + body, the body canonicalised when it is JSON (`parsed`, when the caller
    has parse_json_body's result already) and raw otherwise."""
    digest = hashlib.sha256()
    digest.update(method.upper().encode() + b"\n" + path.encode() + b"\n")
    if parsed is _UNPARSED:
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


def parse_json_body(body: bytes, content_type: str) -> Any:
    if not body or "json" not in (content_type or "").lower():
        return _NOT_JSON
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: a client's deeply nested body must not become a 500.
        return _NOT_JSON
    # JSON deeper than Python can walk again, or the database store, is opaque bytes.
    depth = nesting_depth(parsed)
    return _NOT_JSON if depth > MARIADB_JSON_DEPTH and depth > json_depth_limit() else parsed


def is_json(value: Any) -> bool:
    return value is not _NOT_JSON
