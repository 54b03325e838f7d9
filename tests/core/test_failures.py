"""Failures grouped by cause (idemdash/core/failures.py): what varies between occurrences
is masked, what tells causes apart is kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from idemdash.core.failures import (
    CAUSE_LIMIT,
    QUIET,
    AlreadyInState,
    Failure,
    FailureGroup,
    cause,
    record,
    resolve_quiet,
    set_state,
)
from idemdash.core.models import AuditEntry
from tests.concurrently import in_threads

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


# --- the groups ------------------------------------------------------------------------------

HANDLER_BUG = TRACEBACK.format(line=40, refund="re_3NxYqL2eZvKYlo2C", order=8200000000001)


@pytest.mark.django_db
def test_failures_of_one_cause_at_one_place_are_one_group_with_its_count_and_span():
    t0 = timezone.now()
    for n in range(32):
        error = TRACEBACK.format(line=40, refund=f"re_{n:010d}abc", order=8200000000000 + n)
        record(Failure("event", "shopify refunds/create", error), unit_id=n + 1, now=t0 + timedelta(seconds=n))
    record(Failure("event", "shopify orders/create", HANDLER_BUG), unit_id=99, now=t0)  # another place: another group
    group = FailureGroup.objects.get(place="shopify refunds/create")
    assert (group.failures, group.first_seen, group.last_seen, group.sample_id, group.state) == (
        32, t0, t0 + timedelta(seconds=31), 32, "open")
    assert "re_0000000031abc" in group.sample  # the latest error, whole
    assert FailureGroup.objects.count() == 2


@pytest.mark.django_db
def test_a_quiet_group_resolves_by_itself_and_its_next_failure_reopens_it():
    t0 = timezone.now()
    record(Failure("message", "http.post partner.example.com", "HTTP 403: forbidden"), unit_id=1, now=t0)
    assert resolve_quiet(t0 + QUIET - timedelta(seconds=1)) == 0
    assert resolve_quiet(t0 + QUIET + timedelta(seconds=1)) == 1
    group = FailureGroup.objects.get()
    assert (group.state, group.state_by) == ("resolved", "")
    record(Failure("message", "http.post partner.example.com", "HTTP 403: forbidden"), unit_id=2, now=t0 + 2 * QUIET)
    group.refresh_from_db()
    assert (group.state, group.failures, group.state_changed_at) == ("open", 2, t0 + 2 * QUIET)


@pytest.mark.django_db
def test_acknowledging_or_resolving_is_done_once_and_audited_once(operator):
    record(Failure("event", "stripe invoice.paid", HANDLER_BUG), unit_id=1, now=timezone.now())
    group = FailureGroup.objects.get()
    set_state(group, "acknowledged", actor="otto", user=operator)
    with pytest.raises(AlreadyInState):
        set_state(group, "acknowledged", actor="otto", user=operator)
    stale = FailureGroup.objects.get()
    set_state(group, "resolved", actor="otto", user=operator)
    with pytest.raises(AlreadyInState):  # seen acknowledged, resolved meanwhile
        set_state(stale, "resolved", actor="ann")
    entries = list(AuditEntry.objects.order_by("pk").values_list("action", "status_before", "status_after", "object_name"))
    assert entries == [
        ("failure_group.acknowledge", "open", "acknowledged", f"stripe invoice.paid: {group.cause}"),
        ("failure_group.resolve", "acknowledged", "resolved", f"stripe invoice.paid: {group.cause}"),
    ]


@pytest.mark.django_db(transaction=True)
def test_concurrent_first_failures_of_one_cause_make_one_group_counting_each():
    n = 8
    now = timezone.now()
    in_threads(n, lambda i: transaction.atomic()(record)(
        Failure("message", "http.post partner.example.com", f"HTTP 403: refused order {1000 + i}"), unit_id=i, now=now))
    group = FailureGroup.objects.get()
    assert group.failures == n and group.cause == "HTTP 403: refused order <n>"
