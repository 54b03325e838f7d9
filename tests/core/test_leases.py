"""The leased-work vocabulary (idemdash/core/leases.py), on the receipts' model: the core
functions work on any kind of unit."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from idemdash.core import leases
from receipts.models import Receipt
from tests.waits import until

pytestmark = pytest.mark.django_db


def a_receipt(key: str = "k1", *, status: str = "processing", lease_minutes: float = 1) -> Receipt:
    now = timezone.now()
    return Receipt.objects.create(
        scope="s", key=key, operation="op", fingerprint="f", status=status, created_at=now, updated_at=now,
        expires_at=now + timedelta(days=1), lease_expires_at=now + timedelta(minutes=lease_minutes),
    )


def test_compare_and_set_changes_the_unit_when_status_and_token_still_match():
    r = a_receipt()
    rows = Receipt.objects.filter(pk=r.pk)
    assert leases.compare_and_set(rows, "fencing_token", 1, "processing", status="failed", fencing_token=F("fencing_token") + 1)
    r.refresh_from_db()
    assert (r.status, r.fencing_token) == ("failed", 2)


@pytest.mark.parametrize("token, status", [(2, "processing"), (1, "completed")])
def test_compare_and_set_changes_nothing_for_a_stale_token_or_status(token, status):
    r = a_receipt()
    assert not leases.compare_and_set(Receipt.objects.filter(pk=r.pk), "fencing_token", token, status, status="failed")
    assert Receipt.objects.get(pk=r.pk).status == "processing"


def test_stuck_is_the_owned_units_past_their_lease_oldest_lease_first():
    later = a_receipt("later", lease_minutes=-1)
    first = a_receipt("first", lease_minutes=-5)
    a_receipt("live", lease_minutes=5)
    a_receipt("failed", status="failed", lease_minutes=-5)
    now = timezone.now()
    assert list(leases.stuck(Receipt, "processing", now)) == [first, later]
    assert [leases.is_stuck(r, "processing", now) for r in (first, Receipt.objects.get(key="live"))] == [True, False]
    assert not leases.is_stuck(Receipt.objects.get(key="failed"), "processing", now)


@pytest.mark.django_db(transaction=True)
def test_renewing_keeps_the_lease_alive_while_the_block_runs_and_stops_once_the_unit_is_settled():
    # The renewal's thread has its own connection: the unit must be committed for it to see it.
    r = a_receipt(lease_minutes=0.01)  # a 0.6 s lease
    rows = Receipt.objects.filter(pk=r.pk)
    seen = [rows.get().lease_expires_at]

    def pushed_on() -> bool:
        if (expires := rows.get().lease_expires_at) > seen[-1]:
            seen.append(expires)
        return len(seen) > 3

    before = set(threading.enumerate())
    with leases.renewing(rows, "fencing_token", 1, "processing", lease_seconds=0.6):
        (keeper,) = [t for t in set(threading.enumerate()) - before if t.name == "lease-renewal"]
        until(pushed_on, "the lease pushed on three times")  # past its 0.6 s, only renewals keep it
        rows.update(status="completed")
        until(lambda: not keeper.is_alive(), "the renewal to stop at the settled unit, inside the block")
        settled = rows.get().lease_expires_at
    assert rows.get().lease_expires_at == settled  # no renewal of a settled unit
