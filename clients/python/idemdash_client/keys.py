"""Idempotency keys derived from the intent's inputs: the same inputs give the same key in
every process, and in every client (clients/test-vectors/keys.json holds what these give,
and the TypeScript client's makeKey and toolCallKey are checked against it).

Keys must be derived from the intent's inputs (which invoice, which lead, which template),
never from the time of the call or a random value: a retry after a crash must produce the
same key, or it is a new intent and runs again.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from idemdash_client.canonical import canonical_json

_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,255}$")
MAX_KEY_LENGTH = 255


def make_key(*parts: Any) -> str:
    """Parts joined with ':'. Too long or not printable ASCII: a readable prefix + sha256."""
    if not parts:
        raise ValueError("make_key needs at least one part")
    text = ":".join(str(part) for part in parts)
    if _PRINTABLE.fullmatch(text):
        return text
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    readable = re.sub(r"[^\x20-\x7e]", "_", text)[: MAX_KEY_LENGTH - len(digest) - 1]
    return f"{readable}:{digest}" if readable else digest


def tool_call_key(run_id: Any, tool_name: str, arguments: Any) -> str:
    """The key of an agent's tool call within one run or conversation (`run_id`): the same
    tool with the same arguments (in any key order) in the same run gives the same key.

    There is no unscoped form: a key that outlived its run would answer the same call in a
    new conversation with the old result, for as long as the receipt is kept."""
    return make_key(run_id, tool_name, hashlib.sha256(canonical_json(arguments)).hexdigest())
