"""clients/python/idemdash_client/retry_after.py: the one Retry-After parser, for the clients'
retries and the outbox's http.post."""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from email.utils import format_datetime

import pytest

from idemdash_client.client import IdempotencyClient
from idemdash_client.retry_after import parse_retry_after

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


def test_the_client_waits_out_a_retry_after_date_up_to_its_cap():
    client = IdempotencyClient("http://127.0.0.1:9", "token", max_backoff=5)
    try:
        in_a_minute = format_datetime(datetime.now(dt_timezone.utc) + timedelta(seconds=60), usegmt=True)
        assert client._backoff(0, in_a_minute) == 5  # capped: a date a minute away is not waited whole
        assert client._backoff(0, "2") == 2
        assert client._backoff(2, None) == 2  # none given: 0.5 s doubling
    finally:
        client.close()
