"""The rules of a reference, the per-object limit, and the running cause
(clients/python/idemdash_client/references.py): no database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idemdash_client import references
from idemdash_client.references import Cause, InvalidReference, References, causing, validate, validate_all


def _value_is_acceptable(value: str) -> bool:
    return 1 <= len(value) <= 255 and value.isprintable() and value == value.strip()


@given(st.text(max_size=300))
def test_a_value_is_taken_exactly_when_it_is_short_printable_and_unpadded(value):
    if _value_is_acceptable(value):
        assert validate("stripe.charge", value) == ("stripe.charge", value)
    else:
        with pytest.raises(InvalidReference) as refused:
            validate("stripe.charge", value)
        assert refused.value.field == "value"


@given(st.text(max_size=80))
def test_a_kind_is_a_short_lowercase_token(kind):
    ok = references.KIND_RE.fullmatch(kind) is not None
    assert ok == (1 <= len(kind) <= 64 and kind[0] in "abcdefghijklmnopqrstuvwxyz0123456789"
                  and all(c in "abcdefghijklmnopqrstuvwxyz0123456789_.:-" for c in kind))
    if ok:
        assert validate(kind, "ch_1") == (kind, "ch_1")
    else:
        with pytest.raises(InvalidReference):
            validate(kind, "ch_1")


@pytest.mark.parametrize("value", ["ch_\u202e1", "a\u200bb", "tab\there", "\x00", " ch_1", "x" * 256, "", None, 1.5, True])
def test_values_that_could_hide_or_reorder_text_are_refused(value):
    with pytest.raises(InvalidReference):
        validate("stripe.charge", value)


def test_an_integer_value_is_taken_as_its_text():
    assert validate("order", 1042) == ("order", "1042")


def test_an_object_keeps_its_references_once_each_and_at_most_the_limit():
    gathered = References()
    gathered.refer("order", "1")
    gathered.refer("order", "1")
    for n in range(2, references.MAX_PER_OBJECT + 1):
        gathered.refer("order", str(n))
    assert len(gathered.items) == references.MAX_PER_OBJECT
    gathered.refer("order", "1")  # one it has already: no error
    with pytest.raises(InvalidReference) as refused:
        gathered.refer("order", "one too many")
    assert refused.value.field == "references"


def test_the_json_form_is_checked_item_by_item():
    assert validate_all([{"kind": "order", "value": "1"}, ("order", "1"), {"kind": "sku", "value": "A"}]) == [
        ("order", "1"), ("sku", "A"),
    ]
    for bad in ([{"kind": "order"}], [{"kind": "order", "value": "1", "extra": 1}], ["order:1"], [["order", "1", "x"]]):
        with pytest.raises(InvalidReference):
            validate_all(bad)
    with pytest.raises(InvalidReference):
        validate_all([{"kind": "order", "value": str(n)} for n in range(references.MAX_PER_OBJECT + 1)])


def test_the_innermost_cause_is_current_and_the_outer_one_comes_back():
    assert references.cause() is None
    outer, inner = Cause(references.RECEIPT, 1), Cause(references.WEBHOOK_EVENT, 2)
    with causing(outer):
        with causing(inner):
            assert references.cause() is inner
        assert references.cause() is outer
    assert references.cause() is None
