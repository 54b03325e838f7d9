"""The shared key vectors (clients/test-vectors/keys.json): what Python's make_key,
tool_call_key and canonical_json give for tricky inputs. Every client in clients/ checks
itself against the same file, so their keys are byte-identical to Python's.

The file is written from this module (`python -m tests.clients.test_key_vectors`) and the
test below fails when it is stale, so it cannot drift from the Python client.
"""

from __future__ import annotations

import json
import math
import random
import struct
import sys
from pathlib import Path
from typing import Any

from idemdash_client.canonical import canonical_json
from idemdash_client import make_key, tool_call_key

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


def random_double(rng: random.Random) -> float:
    """A double from random bits (any exponent) or a short decimal at any scale: the JCS
    number form is where a port is most likely to differ."""
    if rng.random() < 0.5:
        return round(rng.uniform(-1e6, 1e6), rng.randint(0, 8)) * 10.0 ** rng.randint(-30, 30)
    while True:
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            return value


def random_doubles(count: int) -> list[float]:
    rng = random.Random(8785)
    return [random_double(rng) for _ in range(count)]


# Names and strings drawn from the places where orderings and escapes differ: ASCII, controls,
# Latin-1, the BMP above the surrogates (U+E000+, which UTF-16 sorts after astral characters),
# astral characters and JSON's own escapes.
ALPHABET = "aAzZ09 _-:\"\\/\n\t\x00\x1f\x7féßĀ€日\ue000\ufb33\uffff😀𝄞\U0010fffd"


def random_documents(count: int) -> list[Any]:
    """Nested JSON of every kind, seeded: a property test of canonical JSON that any client
    can replay from the file."""
    rng = random.Random(21)

    def text() -> str:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))

    def value(depth: int) -> Any:
        scalars = ["string", "int", "float", "bool", "null"] if depth else []
        kind = rng.choice(["object", "array"] * (depth < 4) + scalars)
        if kind == "object":
            return {text(): value(depth + 1) for _ in range(rng.randint(0, 5))}
        if kind == "array":
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        if kind == "string":
            return text()
        if kind == "int":
            if rng.random() < 0.05:  # beyond JCS: the whole document takes Python's fallback form
                return rng.choice([-1, 1]) * rng.randint(2**53, 2**70)
            return rng.randint(-(2**53) + 1, 2**53 - 1) // 10 ** rng.randint(0, 15)
        if kind == "float":
            # Not an integral float a JavaScript number could be: Python's fallback form
            # writes 1.0 where JavaScript has only 1 (the vectors' one known ambiguity).
            number = random_double(rng)
            while number.is_integer() and abs(number) <= 2**53:
                number = random_double(rng)
            return number
        return rng.choice([True, False]) if kind == "bool" else None

    return [value(0) for _ in range(count)]


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
        "documents": [
            {"value": value, "canonical": canonical_json(value).decode(), "key": tool_call_key("run", "tool", value)}
            for value in random_documents(200)
        ],
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
