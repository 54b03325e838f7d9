"""idemdash/core/mysql.py's deadlock retry, against a real deadlock on MySQL/MariaDB: two
threads, each with its own connection, lock two receipts in opposite orders."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from idemdash.core.mysql import ER_LOCK_DEADLOCK, retry_deadlocks
from receipts.models import Receipt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _on_mysql() -> None:
    if connection.vendor != "mysql":
        pytest.skip("needs MySQL/MariaDB: set DATABASE_URL=mysql://...")


def _receipt(key: str) -> int:
    now = timezone.now()
    return Receipt.objects.create(
        scope="deadlock", key=key, operation="op", fingerprint="f", request={}, status="processing",
        lease_expires_at=now, created_at=now, updated_at=now, expires_at=now + timedelta(days=1),
    ).pk


def _deadlock(outer_atomic: bool) -> tuple[dict[str, int], list[BaseException]]:
    """Two workers update receipts a and b in opposite orders, meeting at a barrier after
    their first update, so that InnoDB must roll one of them back."""
    a, b = _receipt("a"), _receipt("b")
    barrier = threading.Barrier(2, timeout=10)
    calls = {"ab": 0, "ba": 0}
    errors: list[BaseException] = []

    def work(name: str, first: int, second: int) -> None:
        calls[name] += 1
        with transaction.atomic():
            Receipt.objects.filter(pk=first).update(attempts=2)
            if calls[name] == 1:
                barrier.wait()
            Receipt.objects.filter(pk=second).update(attempts=3)

    def worker(name: str, first: int, second: int) -> None:
        try:
            if outer_atomic:
                with transaction.atomic():
                    retry_deadlocks(work)(name, first, second)
            else:
                retry_deadlocks(work)(name, first, second)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=("ab", a, b)), threading.Thread(target=worker, args=("ba", b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return calls, errors


def test_the_deadlock_victim_runs_again_and_both_units_of_work_land() -> None:
    calls, errors = _deadlock(outer_atomic=False)
    assert errors == []
    assert sorted(calls.values()) == [1, 2]  # the victim ran twice, the other once
    # The victim ran last, so its writes are the ones that stand: its first receipt 2, its second 3.
    victim = "ab" if calls["ab"] == 2 else "ba"
    attempts = dict(Receipt.objects.filter(scope="deadlock").values_list("key", "attempts"))
    assert attempts == ({"a": 2, "b": 3} if victim == "ab" else {"b": 2, "a": 3})

def test_inside_a_callers_transaction_the_deadlock_goes_up_to_the_caller() -> None:
    calls, errors = _deadlock(outer_atomic=True)
    assert calls == {"ab": 1, "ba": 1}
    assert len(errors) == 1
    assert isinstance(errors[0], OperationalError) and errors[0].args[0] == ER_LOCK_DEADLOCK
