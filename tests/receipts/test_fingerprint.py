from __future__ import annotations

import pytest

from receipts.fingerprint import fingerprint_http, parse_json_body, is_json


def test_json_bodies_fingerprint_the_same_in_any_key_order():
    a = fingerprint_http("POST", "/x", b'{"a": 1, "b": 2}', "application/json")
    assert a == fingerprint_http("post", "/x", b'{"b":2,"a":1}', "application/json; charset=utf-8")
    assert a != fingerprint_http("POST", "/y", b'{"a": 1, "b": 2}', "application/json")


@pytest.mark.parametrize("depth", [950, 2000, 100_000])
def test_a_body_nested_too_deep_is_fingerprinted_raw_instead_of_raising(depth):
    body = b"[" * depth + b"]" * depth
    first = fingerprint_http("POST", "/x", body, "application/json")
    assert first == fingerprint_http("POST", "/x", body, "application/json")
    deeper = b"[" * (depth + 1) + b"]" * (depth + 1)
    assert first != fingerprint_http("POST", "/x", deeper, "application/json")


def test_an_unclosed_deep_body_is_not_json():
    assert not is_json(parse_json_body(b"[" * 100_000, "application/json"))
