"""@idempotent under ATOMIC_REQUESTS (cookiecutter-django turns it on), served by a real
gunicorn with several worker processes, each with its own database connection.

Under ATOMIC_REQUESTS the claim commits with the view, not before it: a duplicate's insert
of the same key waits on the first attempt's uncommitted row (PostgreSQL and InnoDB both
lock a unique key being inserted) and, once the first commits, finds the completed receipt
and replays it. So duplicates wait instead of being told 409, and exactly one attempt per
key runs. What differs is documented in docs/http-contract.md (ATOMIC_REQUESTS). Not on
MySQL/MariaDB, where InnoDB deadlocked such claims and `check` refuses the setting.
"""

from __future__ import annotations

import threading
from collections import Counter

import httpx
import pytest
from django.db import connection

from idemdash.core.models import AuditEntry

from receipts.models import Attempt, Receipt
from tests.concurrently import assert_each_key_ran_once, same_keys_at_once, uncommitted, until_transactions_wait_on_locks
from tests.gunicorn import Gunicorn

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
    # Refused there by receipts.E004: InnoDB deadlocks concurrent claims of one key (1213).
    pytest.mark.skipif(connection.vendor == "mysql", reason="ATOMIC_REQUESTS is refused on MySQL (receipts.E004)"),
]

KEYS = [f"atomic-{i}" for i in range(4)]
CALLERS_PER_KEY = 16
WORKERS = 4


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        server = Gunicorn(
            tmp_path_factory.mktemp("gunicorn") / "gunicorn.log", "tests.receipts.atomic_settings", workers=WORKERS
        )
    yield server
    server.stop()


def _post(url: str, path: str, key: str) -> httpx.Response:
    return httpx.post(url + path, json={"amount": 100}, headers={"Idempotency-Key": key}, timeout=60)


@pytest.mark.slow
def test_duplicates_wait_for_the_first_attempts_commit_and_are_replayed(gunicorn):
    answers = same_keys_at_once(lambda key: _post(gunicorn.url, "/capture", key), KEYS, CALLERS_PER_KEY)
    assert_each_key_ran_once(answers, KEYS, CALLERS_PER_KEY, gunicorn.log())
    outcomes = Counter(Attempt.objects.values_list("outcome", flat=True))
    # Never in_progress (a 409), never a takeover: the duplicates waited for the commit. On
    # PostgreSQL one that arrived while the first ran is logged `waited` (its insert waited on
    # the uncommitted row); one that a busy worker took after the commit, a plain replay.
    # SQLite's duplicates wait for the write lock before the claim begins: all plain replays.
    duplicates = outcomes.pop("waited", 0) + outcomes.pop("replayed", 0)
    assert outcomes == {"claimed": len(KEYS), "completed": len(KEYS)}
    assert duplicates == len(KEYS) * (CALLERS_PER_KEY - 1)
    assert set(Receipt.objects.values_list("status", flat=True)) == {"completed"}


@pytest.mark.slow
def test_an_exception_rolls_back_the_claim_too_so_the_next_attempt_runs(gunicorn):
    assert _post(gunicorn.url, "/explode", "atomic-boom").status_code == 500
    # The request's transaction held the receipt, its failure and the view's row: all gone.
    assert not Receipt.objects.filter(key="atomic-boom").exists()
    assert not AuditEntry.objects.filter(object_id="atomic-boom").exists()
    assert _post(gunicorn.url, "/explode", "atomic-boom").status_code == 500
    assert not Attempt.objects.filter(key="atomic-boom").exists()


@pytest.mark.slow
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the row lock a duplicate's insert waits on: PostgreSQL")
def test_a_duplicate_whose_claim_waited_on_the_uncommitted_first_attempt_is_logged_waited():
    """The request transaction ATOMIC_REQUESTS opens, held by hand: the first attempt claims
    and completes in it and has not committed; the duplicate's claim, on its own connection,
    waits on the uncommitted key, and once the first commits it replays that result, logged
    as the concurrent duplicate it is (`waited`, with how long), not as a plain replay."""
    from django.db import connections

    from receipts import store

    answers: dict[str, store.ClaimResult] = {}

    def first_attempt() -> None:
        claim = store.claim("user:1", "atomic-wait", "email.send", {"to": "a"})
        store.complete(store.Held("user:1", "atomic-wait", claim.token), response_status=201, body="{}")

    def duplicate() -> None:
        try:
            answers["duplicate"] = store.claim("user:1", "atomic-wait", "email.send", {"to": "a"})
        finally:
            connections.close_all()

    duplicate_thread = threading.Thread(target=duplicate)
    with uncommitted(first_attempt):  # the request's transaction, not committed yet
        duplicate_thread.start()
        until_transactions_wait_on_locks(1, "the duplicate's claim waits on the first attempt's row")
    duplicate_thread.join(30)

    answer = answers["duplicate"]
    assert answer.outcome == "replayed" and answer.waited_ms is not None and answer.waited_ms > 0
    logged = Attempt.objects.filter(key="atomic-wait").order_by("pk").values_list("outcome", "waited_ms")
    assert [outcome for outcome, _ in logged] == ["claimed", "completed", "waited"]
