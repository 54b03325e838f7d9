"""make_key and tool_call_key (idemdash_client/keys.py); the keys they give for tricky inputs
are the shared vectors of tests/clients/test_key_vectors.py."""

from __future__ import annotations

import pytest

from idemdash_client import make_key, tool_call_key
from receipts import keys


def test_make_key_joins_its_parts():
    assert make_key("email", 42, "welcome", "2026-11-22") == "email:42:welcome:2026-11-22"


@pytest.mark.parametrize("parts", [("x" * 300,), ("lead", "Zoë Société"), ("tab\there",)])
def test_make_key_hashes_what_is_too_long_or_not_printable_ascii(parts):
    key = make_key(*parts)
    assert keys.validate_key(key) == key
    assert len(key) <= 255
    assert key == make_key(*parts)
    assert key != make_key(*parts, "other")
    assert key[-64:] != make_key(*parts[:-1], parts[-1] + "!")[-64:]


def test_make_key_keeps_a_readable_prefix():
    assert make_key("lead", "Zoë").startswith("lead:Zo_")


def test_make_key_needs_a_part():
    with pytest.raises(ValueError):
        make_key()


def test_tool_call_key_ignores_argument_order_but_not_values():
    a = tool_call_key("conv-1", "search", {"q": "lyon", "limit": 5})
    assert a == tool_call_key("conv-1", "search", {"limit": 5, "q": "lyon"})
    assert a != tool_call_key("conv-1", "search", {"q": "lyon", "limit": 6})
    assert a != tool_call_key("conv-1", "fetch", {"q": "lyon", "limit": 5})
    assert a.startswith("conv-1:search:") and keys.validate_key(a)


def test_tool_call_key_is_scoped_to_its_run():
    assert tool_call_key("conv-1", "search", {"q": "lyon"}) != tool_call_key("conv-2", "search", {"q": "lyon"})
