"""`@idempotent` renews the lease of a view that runs longer than a third of it
(receipts/store.py:kept), on PostgreSQL, where another request could otherwise take the key
over while the view still runs. (On SQLite the view's transaction holds the write lock, so
no claim can take over meanwhile, and nothing is renewed.)"""

from __future__ import annotations

import threading
import time

import pytest
from asgiref.sync import async_to_sync
from django.db import connections
from django.test import AsyncClient, Client

from idemdash.core import leases
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt
from tests.receipts import urls as test_urls
from tests.receipts.view_kinds_urls import ASYNC_VIEWS

pytestmark = [pytest.mark.slow, pytest.mark.urls("tests.receipts.view_kinds_urls"), pytest.mark.postgres]

# Every kind of view settles through one path (receipts/decorators.py:_run), which keeps the
# lease with store.kept: one sync and one async view prove it, each waiting out real leases
# (the other kinds' contract is the fast tier's, tests/receipts/test_view_contract.py).
VIEWS = ["/function", "/async-function"]


@pytest.fixture(autouse=True)
def _counted_runs():
    runs: list[float] = []
    test_urls.hooks["hook"] = lambda: runs.append(time.monotonic())
    yield runs
    test_urls.hooks.clear()


def _post(sleep: float, view: str = "/function") -> int:
    send = async_to_sync(AsyncClient().post) if view in ASYNC_VIEWS else Client().post
    try:
        return send(
            f"{view}?sleep={sleep}", {"amount": 1}, content_type="application/json",
            headers={"Idempotency-Key": "slow"},
        ).status_code
    finally:
        connections.close_all()


def _duplicates_while_the_first_runs(
    sleep: float, every: float, count: int, view: str = "/function"
) -> tuple[int | None, list[int]]:
    first: list[int] = []
    thread = threading.Thread(target=lambda: first.append(_post(sleep, view)))
    thread.start()
    deadline = time.monotonic() + 10
    while not Receipt.objects.filter(key="slow").exists():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    duplicates = []
    for _ in range(count):
        time.sleep(every)
        duplicates.append(_post(sleep, view))  # the same request: a takeover would run it again
    thread.join(30)
    return (first[0] if first else None), duplicates


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("view", VIEWS)
def test_a_view_longer_than_its_lease_keeps_its_key_until_it_returns(settings, _counted_runs, view):
    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"lease_seconds": 1}}
    first, duplicates = _duplicates_while_the_first_runs(sleep=3, every=0.6, count=4, view=view)
    assert first == 201
    # 1.2 s and more into a view under a 1 s lease: still its key. (A duplicate that a loaded
    # machine sends after the view returned is replayed: 201, the view not run again.)
    assert duplicates[:2] == [409, 409] and set(duplicates) <= {409, 201}, duplicates
    assert len(_counted_runs) == 1
    assert not Attempt.objects.filter(outcome__in=["lease_takeover", "stale_token"]).exists()
    assert Receipt.objects.get(key="slow").status == "completed"
    assert leases.keeping() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("view", VIEWS)
def test_a_view_running_past_the_longest_lease_is_no_longer_renewed(settings, _counted_runs, view):
    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"lease_seconds": 1}}
    settings.RECEIPTS_MAX_LEASE_SECONDS = 1  # presumed hung after 1 s
    # The view runs 5 s, so the second duplicate (2.4 s in, later on a loaded machine) still
    # meets it running rather than its replay.
    first, duplicates = _duplicates_while_the_first_runs(sleep=5, every=1.2, count=2, view=view)
    # The second duplicate came 2.4 s in, after the lease lapsed: it took over and ran the view.
    assert duplicates[-1] == 201
    assert len(_counted_runs) == 2
    assert first == 409  # the hung view's own completion was refused, its writes rolled back
    assert Attempt.objects.filter(outcome="lease_takeover").count() == 1
    assert AuditEntry.objects.filter(action="test.side_effect", object_id="slow").count() == 1


@pytest.mark.django_db(transaction=True)
def test_under_atomic_requests_a_view_is_not_renewed(settings, monkeypatch):
    """Under ATOMIC_REQUESTS the claim commits with the view, so no request can take it over
    while it runs; a renewal from the renewal thread's own connection would wait on the
    receipt's row (a retry after a failure) while the view waits for that renewal: none."""
    from django.db import connection

    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"lease_seconds": 1}}
    # One settings dict serves every thread's connection, the test client's included.
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    kept_while_running: list[int] = []
    test_urls.hooks["hook"] = lambda: kept_while_running.append(leases.keeping())
    assert _post(sleep=1) == 201
    assert kept_while_running == [0]
    assert Receipt.objects.get(key="slow").status == "completed"
    assert not Attempt.objects.filter(outcome="stale_token").exists()
