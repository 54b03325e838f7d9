"""Failures grouped by cause: the cause an error text names, with what varies from one
occurrence to the next masked (ids, numbers, addresses, times), so that 32 dead events from
one handler bug or 26 dead messages from one partner's 403 are one group each. A traceback's
cause is its last line and the innermost frame it was raised in, as Sentry groups them."""

from __future__ import annotations

import re

from idemdash.core.caller_text import HIDDEN

CAUSE_LIMIT = 300  # characters of a cause kept: the group's title

# What varies between occurrences of one cause, in the order masked: the longer shapes first,
# so that a number inside an id or a time is not masked on its own.
MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"[\w.+-]+@[\w-]+(\.[\w-]+)+"), "<email>"),
    (re.compile(r"\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b"), "<ip>"),
    (re.compile(r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<hex>"),  # a digest, a token
    # A provider's object id (Stripe's ch_3Nx..., evt_...), or any word mixing letters and
    # at least two digits, such as a key or an order number.
    (re.compile(r"\b[a-z]{1,10}_[A-Za-z0-9]{6,}\b"), "<id>"),
    (re.compile(r"\b(?=[A-Za-z0-9_-]*\d[A-Za-z0-9_-]*\d)(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{8,}\b"), "<id>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
]
# A traceback's innermost frame: the file and the function the exception was raised in.
FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<function>.+)$', re.M)
HTTP_STATUS = re.compile(r"^HTTP (\d{3})\b")


def masked(text: str) -> str:
    for pattern, mask in MASKS:
        text = pattern.sub(mask, text)
    return text


def cause(error: str) -> str:
    """The cause `error` names, the same for every occurrence of it: a traceback's last line
    and its innermost frame; an HTTP answer's status; otherwise the first line; hidden
    characters dropped (they cannot tell two causes apart for a reader) and masked."""
    text = HIDDEN.sub("", error.replace("\x00", "")).strip()
    frames = list(FRAME.finditer(text))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return "(no error text)"
    where, headline = "", lines[0]
    if frames or headline.startswith("Traceback"):
        headline = lines[-1]  # the exception, below its frames
    if frames:
        path, function = frames[-1]["path"], frames[-1]["function"].strip()
        where = f" in {path.rsplit('/', 1)[-1]}:{function}"
    if status := HTTP_STATUS.match(headline):
        headline = f"HTTP {status[1]}" + masked(headline[status.end():])
    else:
        headline = masked(headline)
    return (headline[: CAUSE_LIMIT - len(where)] + where).strip()

