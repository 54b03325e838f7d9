"""Failures grouped by cause (idemdash/core/failures.py): what varies between occurrences
is masked, what tells causes apart is kept."""

from __future__ import annotations

import pytest

from idemdash.core.failures import CAUSE_LIMIT, cause

TRACEBACK = '''Traceback (most recent call last):
  File "/srv/app/webhooks/processing.py", line 301, in _run_handler
    handler(event)
  File "/srv/shop/handlers.py", line {line}, in refund_created
    raise RefundFailed(f"refund {{refund}} of order {{order}} failed")
shop.handlers.RefundFailed: refund {refund} of order {order} failed
'''


def test_one_handler_bug_is_one_cause_whatever_the_event_and_line():
    first = cause(TRACEBACK.format(line=40, refund="re_3NxYqL2eZvKYlo2C", order=8200000000001))
    second = cause(TRACEBACK.format(line=41, refund="re_9ZzkqL2eZvKYlo9Q", order=8200000000777))
    assert first == second == "shop.handlers.RefundFailed: refund <id> of order <n> failed in handlers.py:refund_created"


@pytest.mark.parametrize(("error", "expected"), [
    ("HTTP 403: {\"error\": \"forbidden\", \"request_id\": \"req_8a7f6e5d4c\"}", 'HTTP 403: {"error": "forbidden", "request_id": "<id>"}'),
    ("ReadTimeout: timed out after 30.5 s", "ReadTimeout: timed out after <n> s"),
    ("KeyError: 'customer'", "KeyError: 'customer'"),
    ("ConnectError: [Errno 111] Connection refused to 10.0.3.7:8443", "ConnectError: [Errno <n>] Connection refused to <ip>"),
    ("SMTPRecipientsRefused: {'ann@example.com': (550, b'no such user')}", "SMTPRecipientsRefused: {'<email>': (<n>, b'no such user')}"),
    ("ValueError: bad token 9f86d081884c7d659a2feaa0c55ad015 at 2026-12-07T23:01:14.532Z",
     "ValueError: bad token <hex> at <time>"),
    ("LookupError: no row 1b4e28ba-2fa1-11d2-883f-0016d3cca427", "LookupError: no row <uuid>"),
    ("IntegrityError: duplicate key order-A12B34", "IntegrityError: duplicate key <id>"),
])
def test_what_varies_is_masked_and_the_words_stay(error, expected):
    assert cause(error) == expected


def test_two_causes_stay_two():
    assert cause("HTTP 403: forbidden") != cause("HTTP 404: forbidden")
    assert cause("KeyError: 'customer'") != cause("KeyError: 'amount'")


@pytest.mark.parametrize("error", [
    "x" * 10_000,
    "\x00NUL\x00 and \u202ebidi\u202c and \u200bzero-width",
    "bytes from a partner: \udcff\udcfe",  # surrogateescape'd non-UTF-8, as a decoded body holds them
    "",
    "   \n\n  ",
])
def test_any_text_gives_a_cause_of_bounded_length_without_hidden_characters(error):
    found = cause(error)
    assert 0 < len(found) <= CAUSE_LIMIT and "\x00" not in found and "\u202e" not in found and "\u200b" not in found
