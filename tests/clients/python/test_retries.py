"""clients/python/idemdash_client/retries.py: the one Retry-After parser and the one backoff,
for the clients' retries, the in-process API's and the server's."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from email.utils import format_datetime

import pytest

from idemdash_client.client import IdempotencyClient, patience
from idemdash_client.retries import backoff, parse_retry_after

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=dt_timezone.utc)


@pytest.mark.parametrize("value, seconds", [
    ("17", 17.0),
    (" 3 ", 3.0),
    (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
    ("Thu, 01 Jan 2026 12:00:30 GMT", 30.0),
    (format_datetime(NOW - timedelta(seconds=90), usegmt=True), 0.0),  # a date gone by: now
    (None, None), ("", None), ("soon", None), ("-5", None), ("1.5", None), ("Thu, 99 Foo", None),
])
def test_seconds_and_http_dates_are_read_and_anything_else_is_none(value, seconds):
    assert parse_retry_after(value, NOW) == seconds


def test_backoff_grows_from_base_with_jitter_in_the_upper_half_and_stops_at_the_cap():
    for attempt, step in [(1, 2), (2, 4), (3, 8), (10, 60)]:
        delays = [backoff(attempt, 2, 60) for _ in range(50)]
        assert all(step / 2 <= d <= step for d in delays)
        assert len(set(delays)) > 1


def test_backoff_is_never_shorter_than_retry_after_capped_at_its_maximum_and_spreads_a_crowd():
    asked = [backoff(1, 2, 60, retry_after=30) for _ in range(50)]
    assert all(30 <= d <= 37.5 for d in asked) and len(set(asked)) > 1  # not all back at once
    assert 30 <= backoff(1, 2, 60, retry_after="30") <= 37.5
    assert 120 <= backoff(1, 2, 60, retry_after=10_000, retry_after_max=120) <= 150
    assert 1 <= backoff(1, 2, 60, retry_after=0.5) <= 2  # the step is longer: the step


def test_a_refused_duplicate_waits_retry_after_or_the_growing_step_whichever_is_longer():
    assert all(1 <= patience(0, 1, 10) <= 1.25 for _ in range(20))
    assert all(4 <= patience(3, 1, 10) <= 8 for _ in range(20))  # 1 s doubling: the fourth try
    assert all(5 <= patience(10, 0, 10) <= 10 for _ in range(20))  # at most max_backoff


def test_the_client_waits_out_a_retry_after_date_up_to_its_cap():
    client = IdempotencyClient("http://127.0.0.1:9", "token", max_backoff=5)
    try:
        in_a_minute = format_datetime(datetime.now(dt_timezone.utc) + timedelta(seconds=60), usegmt=True)
        assert 5 <= client._backoff(0, in_a_minute) <= 6.25  # capped: a date a minute away is not waited whole
        assert 2 <= client._backoff(0, "2") <= 2.5
        assert 1 <= client._backoff(2, None) <= 2  # none given: 0.5 s doubling, the third retry
    finally:
        client.close()
