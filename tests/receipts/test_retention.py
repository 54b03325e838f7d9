from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, connections, transaction
from django.utils import timezone

from receipts import retention, rollup, store
from receipts.models import ArchivedReceipt, Attempt, AttemptHourly, Receipt
from receipts.outbox import store as outbox
from receipts.outbox.models import OutboxAttempt, OutboxMessage

SCOPE = "client:test"


def completed_receipt(key: str, operation: str = "email.send", *, age: timedelta) -> Receipt:
    with time_machine.travel(timezone.now() - age, tick=False):
        result = store.claim(SCOPE, key, operation, {"key": key})
        store.complete(SCOPE, key, result.token, response_status=201, body=f'{{"id": "{key}"}}')
    return Receipt.objects.get(key=key)


def expired_receipts(count: int, operation: str = "email.send", prefix: str = "old") -> list[str]:
    keys = [f"{prefix}-{n}" for n in range(count)]
    for key in keys:
        completed_receipt(key, operation, age=timedelta(days=8))  # past both TTLs
    return keys


def only(name: str) -> list[retention.Purger]:
    return [p for p in retention.installed_purgers() if p.name == name]


def attempts_per_outcome_last_week() -> Counter:
    since = timezone.now() - timedelta(days=7)
    return Counter(Attempt.objects.filter(created_at__gte=since).values_list("outcome", flat=True))


@pytest.mark.django_db
def test_expired_receipts_are_deleted_in_bounded_batches():
    expired_receipts(25)
    fresh = completed_receipt("fresh", age=timedelta(hours=1))
    batches: list[int] = []
    (result,) = retention.purge(
        batch_size=10, purgers=only("receipts.expired"), progress=lambda purger, due: batches.append
    )
    assert batches == [10, 10, 5]
    assert (result.due, result.deleted, result.batches) == (25, 25, 3)
    assert list(Receipt.objects.values_list("pk", flat=True)) == [fresh.pk]


@pytest.mark.django_db
def test_financial_receipts_are_archived_before_they_are_deleted():
    expired_receipts(3, "payment.capture", prefix="pay")
    expired_receipts(2, "email.send", prefix="mail")
    (result,) = retention.purge(batch_size=2, purgers=only("receipts.expired"))
    assert (result.deleted, result.archived) == (5, 3)
    assert not Receipt.objects.exists()
    archived = ArchivedReceipt.objects.order_by("key")
    assert [a.key for a in archived] == ["pay-0", "pay-1", "pay-2"]
    first = archived[0]
    assert (first.scope, first.operation, first.status, first.response_status) == (SCOPE, "payment.capture", "completed", 201)
    assert first.response_body == '{"id": "pay-0"}' and first.request == {"key": "pay-0"}


@pytest.mark.django_db
def test_an_archive_that_fails_takes_its_batch_deletion_with_it():
    expired_receipts(2, "payment.capture")

    def archive_then_fail(batch, now):
        retention.archive_financial_receipts(batch, now)
        raise RuntimeError("archive storage full")

    purger = retention.Purger("receipts.expired", retention.due_receipts, archive=archive_then_fail)
    with pytest.raises(RuntimeError):
        retention.purge(purgers=[purger])
    assert Receipt.objects.count() == 2 and not ArchivedReceipt.objects.exists()


@pytest.mark.django_db
def test_a_dry_run_counts_and_deletes_nothing():
    expired_receipts(3, "payment.capture")
    results = {r.name: r for r in retention.purge(dry_run=True)}
    assert results["receipts.expired"].due == 3 and results["receipts.expired"].deleted == 0
    assert Receipt.objects.count() == 3 and not ArchivedReceipt.objects.exists()


@pytest.mark.django_db
def test_purging_receipts_leaves_the_dashboard_counts_of_last_week_unchanged():
    # Receipts counted in last week's chart that expired since (24 h TTL, 30 h old).
    for n in range(4):
        key = f"expired-{n}"
        completed_receipt(key, age=timedelta(hours=30))
        with time_machine.travel(timezone.now() - timedelta(hours=26)):
            store.claim(SCOPE, key, "email.send", {"key": key})  # a retry, replayed
    completed_receipt("fresh", age=timedelta(hours=2))
    before = attempts_per_outcome_last_week()
    assert before == {"claimed": 5, "completed": 5, "replayed": 4}
    (result,) = retention.purge(purgers=only("receipts.expired"), batch_size=3)
    assert result.deleted == 4
    assert attempts_per_outcome_last_week() == before
    assert Attempt.objects.filter(receipt=None).count() == 4 * 3  # kept, unlinked


@pytest.mark.django_db
def test_attempt_logs_are_kept_for_the_attempt_retention_period(settings):
    settings.RECEIPTS_ATTEMPT_RETENTION_DAYS = 35
    completed_receipt("ancient", age=timedelta(days=36))
    completed_receipt("recent", age=timedelta(days=34))
    retention.purge()
    assert set(Attempt.objects.values_list("key", flat=True)) == {"recent"}


@pytest.mark.django_db
def test_hourly_roll_ups_outlive_the_attempt_log_and_have_their_own_retention(settings):
    settings.RECEIPTS_ATTEMPT_RETENTION_DAYS = 7  # shorter than the 30-day charts
    settings.RECEIPTS_ROLLUP_RETENTION_DAYS = 60
    for key, days in (("chart", 20), ("ancient", 61)):
        completed_receipt(key, age=timedelta(days=days))
    rollup.catch_up()
    hours = set(AttemptHourly.objects.values_list("hour", flat=True))
    retention.purge()
    assert not Attempt.objects.exists()  # both attempt logs are past 7 days
    kept = set(AttemptHourly.objects.values_list("hour", flat=True))
    assert kept == {h for h in hours if h > timezone.now() - timedelta(days=60)} and len(kept) == 1
    # The 30-day window still counts the 20-day-old request, now from the roll-up alone.
    from idemdash import queries

    assert queries.receipt_stats(queries.WINDOWS["30d"])["claimed"] == 1


@pytest.mark.django_db
def test_an_expired_receipt_whose_worker_holds_a_live_lease_is_kept():
    with time_machine.travel(timezone.now() - timedelta(days=2), tick=False):
        store.claim(SCOPE, "busy", "email.send", {}, lease_seconds=3600)
    Receipt.objects.filter(key="busy").update(lease_expires_at=timezone.now() + timedelta(minutes=5))
    retention.purge()
    assert Receipt.objects.filter(key="busy").exists()


@pytest.mark.django_db
def test_old_sent_and_dead_outbox_messages_go_and_their_attempt_log_stays(settings):
    settings.OUTBOX_SENT_RETENTION_DAYS = 7
    settings.OUTBOX_DEAD_RETENTION_DAYS = 30
    with time_machine.travel(timezone.now() - timedelta(days=8), tick=False):
        for key in ("sent-old", "dead-old"):
            outbox.enqueue("http.post", {"url": "https://example.com/"}, key)
        sent, dead = sorted(outbox.claim_batch("d"), key=lambda m: m.key, reverse=True)
        outbox.mark_sent(sent)
        outbox.mark_failed(dead, "HTTP 404", permanent=True)
        outbox.enqueue("http.post", {"url": "https://example.com/"}, "pending-old")
    results = {r.name: r.deleted for r in retention.purge()}
    assert results["outbox.sent"] == 1 and results["outbox.dead"] == 0  # dead kept 30 days
    assert set(OutboxMessage.objects.values_list("key", flat=True)) == {"dead-old", "pending-old"}
    assert OutboxAttempt.objects.count() == 2


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_purge_skips_a_row_that_another_transaction_holds_instead_of_waiting():
    expired_receipts(3)
    held = Receipt.objects.order_by("pk").first().pk
    locked, done = threading.Event(), threading.Event()

    def hold_row() -> None:
        try:
            with transaction.atomic():
                list(Receipt.objects.select_for_update().filter(pk=held))
                locked.set()
                done.wait(20)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_row)
    holder.start()
    try:
        assert locked.wait(10)
        (result,) = retention.purge(purgers=only("receipts.expired"))
    finally:
        done.set()
        holder.join(10)
    assert result.deleted == 2
    assert list(Receipt.objects.values_list("pk", flat=True)) == [held]
    assert connection.vendor == "postgresql"
