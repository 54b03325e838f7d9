"""idemdash/core/audit.py: what an entry keeps of an operator's words."""

from __future__ import annotations

from idemdash.core.audit import REASON_LIMIT, cut


def test_a_reason_within_the_limit_is_kept_whole_and_stripped():
    assert cut("  the card issuer was down \n") == "the card issuer was down"
    assert cut("x" * REASON_LIMIT) == "x" * REASON_LIMIT
    assert cut("") == "" and cut(None) == ""


def test_a_longer_reason_says_it_was_cut_and_from_how_long():
    kept = cut("y" * 600)
    assert len(kept) == REASON_LIMIT
    assert kept.startswith("y" * 400) and kept.endswith(" … [cut from 600 characters]")
