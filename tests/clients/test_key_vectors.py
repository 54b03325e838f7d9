"""The shared key vectors (clients/test-vectors/keys.json): what Python's make_key,
tool_call_key and canonical_json give for tricky inputs. Every client in clients/ checks
itself against the same file, so their keys are byte-identical to Python's.

The file is written from this module (`python -m tests.clients.test_key_vectors`) and the
test below fails when it is stale, so it cannot drift from the Python client.
"""

from __future__ import annotations

import json
import random
import struct
import sys
from pathlib import Path
from typing import Any

from idemdash.core.canonical import canonical_json
from receipts.client import make_key, tool_call_key

VECTORS = Path(__file__).resolve().parents[2] / "clients" / "test-vectors" / "keys.json"

MAKE_KEY_PARTS: list[list[Any]] = [
    ["email", 42, "welcome", "2026-11-22"],
    ["one"],
    [""],
    ["", ""],
    [0, -1, 9007199254740991, -9007199254740991],
    [123456789012345678901234567890],  # an int beyond a double: a BigInt in JavaScript
    ["lead", "Zoë Société"],
    ["tab\there"],
    ["line\nbreak", "del\x7f"],
    ["emoji", "😀 party"],  # one code point, two UTF-16 units: one "_"
    ["x" * 255],
    ["x" * 256],
    ["x" * 300],
    ["é" * 300],
    ["😀" * 100],
    ["a:b", "c d", "~!@#$%^&*()"],
    ["日本語"],
]

TOOL_CALLS: list[tuple[Any, str, Any]] = [
    ("conv-1", "search", {"q": "lyon", "limit": 5}),
    ("conv-1", "search", {"limit": 5, "q": "lyon"}),
    ("conv-2", "search", {"q": "lyon", "limit": 5}),
    (42, "noop", None),
    ("run", "empty", {}),
    ("run", "empty_list", []),
    ("run", "empty_string", ""),
    ("run", "scalars", [True, False, None, 0, -0.0, 1, -1, 1.5, "s"]),
    ("run", "nested", {"b": [1, {"d": [], "c": {}}], "a": {"z": {"y": {"x": [None]}}}}),
    ("run", "unicode", {"name": "Zoë", "emoji": "😀", "cjk": "日本語", "escaped": "\"\\/\b\f\n\r\t\x00\x1f\x7f"}),
    ("run", "utf16_key_order", {"\U0001f600": 1, "\ufb33": 2, "€": 3, "a": 4, "A": 5, "": 6, "ab": 7, "é": 8}),
    ("run", "floats", [0.1, 1e21, 1e20, 1e-6, 1e-7, 123456789.125, -5e-324, 1.7976931348623157e308, 2.0**53, 1.0]),
    ("run", "safe_ints", [9007199254740991, -9007199254740991, 4294967296]),
    # Beyond 2**53 - 1 JCS has no form: canonical_json falls back to a sorted compact dump.
    ("run", "large_int", {"id": 9007199254740993, "b": 0.5, "a": [1e-5, 1e16, 123.0e-10, 2.5]}),
    ("run", "large_negative_int", [-123456789012345678901234567890, "x", {"\U0001f600": 1, "\ufb33": 2}]),
    ("Zoë's chat 😀", "search", {"q": "é"}),
    ("r" * 250, "search", {"q": "long run id"}),
]


def random_doubles(count: int) -> list[float]:
    """Doubles from random bit patterns (every exponent) and from short decimals: the JCS
    number form is where a port is most likely to differ."""
    rng = random.Random(8785)
    found: list[float] = []
    while len(found) < count:
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if value == value and value not in (float("inf"), float("-inf")):
            found.append(value)
    for _ in range(count):
        found.append(round(rng.uniform(-1e6, 1e6), rng.randint(0, 8)) * 10.0 ** rng.randint(-30, 30))
    return found


def vectors() -> dict[str, Any]:
    return {
        "about": "Written by `python -m tests.clients.test_key_vectors`; do not edit. Integers "
        "beyond 2**53 - 1 are BigInts in JavaScript.",
        "make_key": [{"parts": parts, "key": make_key(*parts)} for parts in MAKE_KEY_PARTS],
        "tool_call_key": [
            {
                "run_id": run_id,
                "tool_name": tool,
                "arguments": arguments,
                "canonical": canonical_json(arguments).decode(),
                "key": tool_call_key(run_id, tool, arguments),
            }
            for run_id, tool, arguments in TOOL_CALLS
        ],
        "numbers": [{"value": value, "canonical": canonical_json(value).decode()} for value in random_doubles(300)],
    }


def rendered() -> str:
    return json.dumps(vectors(), indent=1, ensure_ascii=False) + "\n"


def test_the_shared_key_vectors_are_what_the_python_client_gives():
    assert VECTORS.read_text(encoding="utf-8") == rendered(), (
        "clients/test-vectors/keys.json is stale: run `python -m tests.clients.test_key_vectors`"
    )


def test_the_vectors_cover_hashed_keys_and_the_canonical_fallback():
    data = vectors()
    assert any(len(case["key"]) == 255 for case in data["make_key"])
    assert any(len(case["key"]) == 64 for case in data["make_key"])  # nothing readable left
    assert any(case["canonical"].startswith('{"a":[1e-05') for case in data["tool_call_key"])


if __name__ == "__main__":
    VECTORS.write_text(rendered(), encoding="utf-8")
    sys.stdout.write(f"wrote {VECTORS}\n")
