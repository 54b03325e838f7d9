"""What a key may be (receipts/keys.py): the one check each front door (the decorator, run_once,
the JSON API) makes before anything is claimed. The header's parsing is proven against
hostile input (tests/faults/test_bad_input.py), an operation's check through each door
(test_decorators.py, test_inprocess.py)."""

from __future__ import annotations

import pytest

from receipts import keys


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there", "nl\n", None, 7])
def test_malformed_keys_are_refused(key):
    with pytest.raises(keys.InvalidKey):
        keys.validate_key(key)


@pytest.mark.parametrize("key", ["a", " spaced ", "x" * 255, "order-1:refund/2"])
def test_printable_ascii_keys_up_to_255_characters_are_taken_as_they_are(key):
    assert keys.validate_key(key) == key
