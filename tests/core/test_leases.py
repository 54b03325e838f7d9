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

def a_receipt(key: str = "k1", *, status: str = "processing", lease_minutes: float = 1) -> Receipt:
    now = timezone.now()
    return Receipt.objects.create(
        scope="s", key=key, operation="op", fingerprint="f", status=status, created_at=now, updated_at=now,
        expires_at=now + timedelta(days=1), lease_expires_at=now + timedelta(minutes=lease_minutes),
    )


@pytest.mark.django_db
def test_compare_and_set_changes_the_unit_when_status_and_token_still_match():
    r = a_receipt()
    rows = Receipt.objects.filter(pk=r.pk)
    assert leases.compare_and_set(rows, "fencing_token", 1, "processing", status="failed", fencing_token=F("fencing_token") + 1)
    r.refresh_from_db()
    assert (r.status, r.fencing_token) == ("failed", 2)


@pytest.mark.django_db
@pytest.mark.parametrize("token, status", [(2, "processing"), (1, "completed")])
def test_compare_and_set_changes_nothing_for_a_stale_token_or_status(token, status):
    r = a_receipt()
    assert not leases.compare_and_set(Receipt.objects.filter(pk=r.pk), "fencing_token", token, status, status="failed")
    assert Receipt.objects.get(pk=r.pk).status == "processing"


@pytest.mark.django_db
def test_stuck_is_the_owned_units_past_their_lease_oldest_lease_first():
    later = a_receipt("later", lease_minutes=-1)
    first = a_receipt("first", lease_minutes=-5)
    a_receipt("live", lease_minutes=5)
    a_receipt("failed", status="failed", lease_minutes=-5)
    now = timezone.now()
    assert list(leases.stuck(Receipt, "processing", now)) == [first, later]
    assert [leases.is_stuck(r, "processing", now) for r in (first, Receipt.objects.get(key="live"))] == [True, False]
    assert not leases.is_stuck(Receipt.objects.get(key="failed"), "processing", now)


class Renewals:
    """A unit's `renew` for the keeper: counts its calls, raises what it is told to."""

    def __init__(self, *, lost_after: int | None = None) -> None:
        self.calls = 0
        self.lost_after = lost_after
        self.enough = threading.Event()
        self.block = threading.Event()  # set: the next renewal waits until released
        self.in_flight = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        if self.block.is_set():
            self.in_flight.set()
            self.release.wait(10)
        if self.calls >= 3:
            self.enough.set()
        if self.lost_after is not None and self.calls >= self.lost_after:
            raise leases.StaleToken("taken over")


def test_kept_renews_every_third_of_the_lease_while_the_block_runs_and_not_after():
    renewals = Renewals()
    with leases.kept(renewals, 0.3, "unit 1"):
        assert leases.keeping() == 1
        assert renewals.enough.wait(10), "three renewals of a 0.3 s lease"
    calls = renewals.calls
    assert leases.keeping() == 0
    later = Renewals()
    with leases.kept(later, 0.3, "unit 2"):  # the keeper has looked again since
        assert later.enough.wait(10)
    assert renewals.calls == calls


def test_a_lost_unit_is_no_longer_renewed_and_a_hung_one_is_left_to_lapse():
    lost, hung, other = Renewals(lost_after=1), Renewals(), Renewals()
    with leases.kept(lost, 0.3, "lost"), leases.kept(hung, 0.3, "hung", longest=0), leases.kept(other, 0.3, "other"):
        assert other.enough.wait(10)
    assert (lost.calls, hung.calls) == (1, 0)


def test_leaving_the_block_waits_for_its_renewal_in_flight():
    renewals = Renewals()
    renewals.block.set()
    left = threading.Event()

    def run() -> None:
        with leases.kept(renewals, 0.3, "unit"):
            assert renewals.in_flight.wait(10)
        left.set()

    thread = threading.Thread(target=run)
    thread.start()
    assert renewals.in_flight.wait(10)
    assert not left.wait(0.2)  # still inside the renewal, so not out of the block
    renewals.release.set()
    thread.join(10)
    assert left.is_set() and renewals.calls == 1
