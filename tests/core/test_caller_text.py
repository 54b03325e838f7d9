"""Text that cannot deceive (idemdash/core/caller_text.py): bidi controls and invisible
characters shown as marks, right-to-left text isolated, on every HTML response too."""

from __future__ import annotations

import re
import sys
import unicodedata

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from hypothesis import given
from hypothesis import strategies as st

from idemdash.core.caller_text import (
    FSI,
    HIDDEN,
    PDI,
    RevealHiddenTextMiddleware,
    isolated_html,
    isolated_plain,
    reveal,
)

BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad\u034f\u3164\U000e0041"
HIDDEN_SAMPLES = BIDI_CONTROLS + INVISIBLE + "\x00\x1b\x7f\x85\u2028\u2029"

# Caller text as an attacker writes it: ordinary letters (Latin, Hebrew, Arabic), markup,
# and the characters that deceive, mixed.
caller_text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(HIDDEN_SAMPLES),
        st.sampled_from("abc <>&\"' שלום مرحبا 123"),
    ),
    max_size=80,
)


def _visible(text: str) -> str:
    return "".join(c for c in text if not HIDDEN.fullmatch(c))


def test_every_format_control_and_separator_character_of_this_unicode_is_hidden():
    # Exhaustive against the running Python's Unicode database: a newer Unicode with a new
    # format character fails here instead of reaching a page unnoticed.
    missed = [
        f"U+{cp:04X}" for cp in range(sys.maxunicode + 1)
        if (unicodedata.category(chr(cp)) in ("Cf", "Zl", "Zp") or
            (unicodedata.category(chr(cp)) == "Cc" and chr(cp) not in "\t\n\r"))
        and not HIDDEN.fullmatch(chr(cp))
    ]
    assert missed == []


@pytest.mark.parametrize("char", list(HIDDEN_SAMPLES))
def test_each_bidi_control_and_invisible_character_becomes_its_visible_mark(char):
    assert reveal(f"a{char}b") == f"a[U+{ord(char):04X}]b"


def test_text_without_hidden_characters_is_returned_as_it_is():
    text = "order-42 שלום ✓ café"
    assert reveal(text) is text


@given(caller_text)
def test_revealed_text_holds_no_hidden_character_and_keeps_every_other_one_in_order(text):
    out = reveal(text)
    assert HIDDEN.search(out) is None
    # Removing the marks gives back the visible characters, in order.
    assert re.sub(r"\[U\+[0-9A-F]{4,6}\]", "", out) == re.sub(r"\[U\+[0-9A-F]{4,6}\]", "", _visible(text))
    assert reveal(out) == out


@given(caller_text)
def test_plain_text_is_isolated_exactly_when_it_holds_right_to_left_letters(text):
    out = isolated_plain(text)
    rtl = any(unicodedata.bidirectional(c) in ("R", "AL") for c in reveal(text))
    assert out == (f"{FSI}{reveal(text)}{PDI}" if rtl else reveal(text))
    # The only isolate characters left are the pair we added.
    inner = out[1:-1] if rtl else out
    assert HIDDEN.search(inner) is None


@given(caller_text)
def test_html_is_escaped_marked_and_isolated_in_bdi_when_it_could_reorder_or_hid_something(text):
    html = str(isolated_html(text))
    wrapped = html.startswith("<bdi>") and html.endswith("</bdi>")
    assert wrapped == bool(HIDDEN.search(text) or any(unicodedata.bidirectional(c) in ("R", "AL") for c in text))
    inner = html[len("<bdi>"):-len("</bdi>")] if wrapped else html
    assert HIDDEN.search(html) is None
    # No markup from the text survives: the only tags are our marks.
    assert re.sub(r'<span class="hidden-char" title="[^"<>]*">\[U\+[0-9A-F]{4,6}\]</span>', "", inner).count("<") == 0


def test_left_to_right_text_is_only_escaped():
    assert str(isolated_html("order-42 <b> & café")) == "order-42 &lt;b&gt; &amp; café"


def test_a_mark_in_html_names_the_character():
    assert str(isolated_html("pay\u202emoc.exe")) == (
        '<bdi>pay<span class="hidden-char" title="[U+202E] RIGHT-TO-LEFT OVERRIDE">[U+202E]</span>moc.exe</bdi>'
    )


def _through_middleware(body: str, content_type: str = "text/html; charset=utf-8") -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Length"] = str(len(response.content))
    return RevealHiddenTextMiddleware(lambda request: response)(RequestFactory().get("/"))


def test_the_middleware_reveals_hidden_characters_in_every_html_response_and_fixes_its_length():
    response = _through_middleware('<td title="a\u202eb">x\u200by</td>')
    assert response.content.decode() == '<td title="a[U+202E]b">x[U+200B]y</td>'
    assert response["Content-Length"] == str(len(response.content))


def test_the_middleware_leaves_other_content_types_alone():
    body = '{"name": "a\u202eb"}'
    assert _through_middleware(body, "application/json").content.decode() == body
