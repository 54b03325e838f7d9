"""Text that cannot deceive: what callers and operators typed, as people are shown it
(docs/operations.md, "Text that cannot deceive").

Bidirectional controls (a RIGHT-TO-LEFT OVERRIDE, U+202E, reverses everything after it up to
the end of the paragraph) and invisible characters (zero-width spaces and joiners, soft
hyphens, tag characters) change how the text around them reads without being seen. Here, in
one place, each is shown as a visible mark (`reveal`), and right-to-left text is isolated
from the words beside it: `isolated_plain` for notifications, `isolated_html` (the
`|untrusted` filter) for pages, and `RevealHiddenTextMiddleware` for whatever HTML a template
did not filter."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.utils.html import conditional_escape, escape
from django.utils.safestring import SafeData, SafeString, mark_safe

# Every character of general category Cf (format: bidi controls and marks, zero-width
# characters, soft hyphen, BOM, tag characters...), C0/C1 controls other than tab and line
# breaks, the line and paragraph separators (a paragraph break resets bidi), and the
# invisible letters and fillers that are not Cf (combining grapheme joiner, Hangul fillers,
# Khmer inherent vowels, Mongolian variation selectors). tests/core/test_caller_text.py
# checks the Cf part against the running Python's Unicode database, so a newer Unicode
# version with new format characters fails a test instead of slipping through.
HIDDEN = re.compile(
    "["
    "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # C0 and C1 controls, not \t \n \r
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\uffa0"
    "\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"
    "\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f"
    "]"
)

FSI, PDI = "\u2068", "\u2069"


def mark(char: str) -> str:
    """`[U+202E]`: ASCII, so that it is inert in every context it can land in (HTML text and
    attributes, JSON, CSV, an email); a `\\u202E` form would be read back as the character
    itself by a JSON parser."""
    return f"[U+{ord(char):04X}]"


def reveal(text: str) -> str:
    """`text` with every hidden character replaced by its visible mark."""
    if HIDDEN.search(text) is None:  # the common case: no copy
        return text
    return HIDDEN.sub(lambda m: mark(m[0]), text)


def has_rtl(text: str) -> bool:
    """Whether `text` holds right-to-left letters (bidi classes R and AL)."""
    return not text.isascii() and any(unicodedata.bidirectional(c) in ("R", "AL") for c in text)


def isolated_plain(text: str) -> str:
    """`reveal(text)`, isolated in FSI...PDI when it holds right-to-left letters (Hebrew,
    Arabic: legitimate, and kept), so it cannot reorder the words or figures beside it. For
    plain-text outputs: notifications."""
    text = reveal(text)
    return f"{FSI}{text}{PDI}" if has_rtl(text) else text


def _marked(match: re.Match) -> str:
    char = match[0]
    name = unicodedata.name(char, "control character")
    return f'<span class="hidden-char" title="{mark(char)} {escape(name)}">{mark(char)}</span>'


def _isolated(html: str, text: str) -> SafeString:
    return mark_safe(f"<bdi>{html}</bdi>" if has_rtl(text) else html)


def isolated_html(value: object) -> SafeString:
    """Caller text as HTML: escaped, hidden characters shown as marks (a
    `<span class="hidden-char">` naming the character), in a `<bdi>` when it holds
    right-to-left letters or hid something. The template filter `|untrusted` (idemdash_tags),
    for caller text inline among our own words. Text of left-to-right letters and neutrals
    alone cannot reorder anything beside it on a left-to-right page, so it is left unwrapped.

    Not the autoescape hook (a `str` subclass with `__html__` on the model's values): any
    string operation (slicing, `truncatechars`, concatenation, the admin's `str()`) turns the
    value back into a plain `str` and silently drops the protection. The filter and the
    middleware work on what is actually output."""
    if value is None:
        value = ""
    if isinstance(value, SafeData):  # already HTML: its markup is ASCII, so reveal is safe on it
        html = str(value)
        return mark_safe(f"<bdi>{reveal(html)}</bdi>") if HIDDEN.search(html) else _isolated(html, html)
    text = str(value)
    if HIDDEN.search(text) is None:
        return _isolated(conditional_escape(text), text)
    out, last = [], 0
    for m in HIDDEN.finditer(text):
        out.append(escape(text[last:m.start()]))
        out.append(_marked(m))
        last = m.end()
    out.append(escape(text[last:]))
    return mark_safe("<bdi>" + "".join(out) + "</bdi>")


class RevealHiddenTextMiddleware:
    """`reveal` on every HTML response's body (pages, htmx fragments, the admin), so that
    what a template shows without `|untrusted` (the admin's change lists and read-only
    fields, breadcrumbs, titles) is covered too. Our own templates hold none of these
    characters, so whatever it finds came from data."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.streaming or not response.get("Content-Type", "").startswith("text/html"):
            return response
        charset = response.charset or "utf-8"
        try:
            body = response.content.decode(charset)
        except UnicodeDecodeError:
            return response
        revealed = reveal(body)
        if revealed is not body:
            response.content = revealed.encode(charset)
            if response.has_header("Content-Length"):
                response["Content-Length"] = str(len(response.content))
        return response
