"""idemdash/core/throttle.py: the client's address, and counting failures per address in
the shared cache (the project's: a table in the test database)."""

from __future__ import annotations

import pytest
import time_machine
from django.test import RequestFactory

from idemdash.core.throttle import BAD_TOKENS, client_ip

pytestmark = pytest.mark.django_db


@pytest.fixture
def limit(settings) -> int:
    settings.API_TOKEN_FAILURE_LIMIT = 3
    settings.API_TOKEN_FAILURE_WINDOW_SECONDS = 60
    return 3


def _request(remote: str = "203.0.113.9", forwarded: str | None = None):
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/", **extra)


def test_without_trusted_proxies_the_address_is_the_peer_whatever_the_header_says(settings):
    settings.TRUSTED_PROXY_COUNT = 0
    assert client_ip(_request("203.0.113.9", "198.51.100.1")) == "203.0.113.9"


@pytest.mark.parametrize(("count", "forwarded", "address"), [
    (1, "198.51.100.7", "198.51.100.7"),
    # The client wrote 10.0.0.1 itself; the one proxy appended what it saw.
    (1, "10.0.0.1, 198.51.100.7", "198.51.100.7"),
    # Two proxies: the outer one saw the client, the inner one saw the outer proxy.
    (2, "10.0.0.1, 198.51.100.7, 192.0.2.10", "198.51.100.7"),
    # Fewer entries than proxies: not through the proxies after all; the peer it is.
    (2, "198.51.100.7", "203.0.113.9"),
    (1, "", "203.0.113.9"),
])
def test_behind_trusted_proxies_the_address_is_what_the_outermost_proxy_saw(settings, count, forwarded, address):
    settings.TRUSTED_PROXY_COUNT = count
    assert client_ip(_request("203.0.113.9", forwarded)) == address


def test_failures_within_the_limit_pass_and_the_next_waits_until_the_window_ends(limit):
    with time_machine.travel("2026-11-25 12:00:15", tick=False):
        assert [BAD_TOKENS.fail("198.51.100.20") for _ in range(limit)] == [0] * limit
        assert BAD_TOKENS.fail("198.51.100.20") == 45
        assert BAD_TOKENS.fail("198.51.100.20") == 45
        # Another address has its own count.
        assert BAD_TOKENS.fail("198.51.100.21") == 0
    with time_machine.travel("2026-11-25 12:00:59.5", tick=False):
        assert BAD_TOKENS.fail("198.51.100.20") == 1
    with time_machine.travel("2026-11-25 12:01:00", tick=False):
        assert BAD_TOKENS.fail("198.51.100.20") == 0


def test_an_ipv6_client_is_counted_by_its_64_prefix(limit):
    with time_machine.travel("2026-11-25 12:00:00", tick=False):
        for host in range(limit):
            assert BAD_TOKENS.fail(f"2001:db8:1:2::{host + 1:x}") == 0
        assert BAD_TOKENS.fail("2001:db8:1:2:ffff::1") == 60
        assert BAD_TOKENS.fail("2001:db8:1:3::1") == 0


def test_a_broken_cache_lets_the_failure_through_and_says_so(settings, limit, caplog):
    settings.CACHES = {**settings.CACHES, "throttle": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "no_such_table"}}
    assert [BAD_TOKENS.fail("198.51.100.30") for _ in range(limit + 2)] == [0] * (limit + 2)
    assert "bad-token throttle: the cache failed" in caplog.text
