from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from idemdash.devtools import seeding
from receipts import store
from receipts.models import Attempt, Receipt

pytestmark = pytest.mark.django_db


def test_it_seeds_receipts_with_their_attempt_logs():
    call_command("seed", receipts=400, batch=150, random_seed=1)

    receipts = seeding.seeded_receipts()
    assert receipts.count() == 400
    statuses = Counter(receipts.values_list("status", flat=True))
    assert statuses["completed"] > 300 and statuses["failed"] > 0 and statuses["processing"] > 0
    # Every receipt's log starts with its claim, and points at it.
    claimed = Attempt.objects.filter(outcome="claimed", key__startswith=seeding.PREFIX)
    assert claimed.count() == 400
    assert set(claimed.values_list("receipt_id", flat=True)) == set(receipts.values_list("id", flat=True))
    outcomes = Counter(Attempt.objects.filter(key__startswith=seeding.PREFIX).values_list("outcome", flat=True))
    assert outcomes["completed"] == statuses["completed"]
    assert outcomes["replayed"] > 0


def test_seeded_rows_are_what_the_store_would_have_written():
    call_command("seed", receipts=300, random_seed=2)
    now = timezone.now()
    for receipt in seeding.seeded_receipts():
        assert receipt.scope.split(":")[0] in ("client", "user")
        assert receipt.created_at <= now
        assert receipt.updated_at >= receipt.created_at
        if receipt.status == "completed":
            assert receipt.response_status and receipt.completed_at >= receipt.created_at
        if receipt.status == "processing":
            assert receipt.lease_expires_at is not None
    mismatches = Attempt.objects.filter(outcome="mismatch", key__startswith=seeding.PREFIX)
    assert all(m.request is not None for m in mismatches)


def test_some_seeded_receipts_are_expired_and_some_stuck():
    call_command("seed", receipts=1000, random_seed=3)
    now = timezone.now()
    receipts = seeding.seeded_receipts()
    assert 40 < receipts.filter(expires_at__lt=now).count() < 200
    assert receipts.filter(status="processing", lease_expires_at__lt=now).exists()


def test_expired_mode_seeds_only_expired_receipts():
    call_command("seed", receipts=200, expired=True, random_seed=4)
    assert not seeding.seeded_receipts().filter(expires_at__gte=timezone.now()).exists()


def test_expired_receipts_expire_in_the_order_they_were_claimed_after_their_attempts():
    # As live receipts do (claim time + TTL), so the purge of the backlog reads the table in
    # order rather than a random scatter of pages.
    call_command("seed", receipts=300, expired=True, batch=70, random_seed=6)
    rows = list(seeding.seeded_receipts().order_by("id").values_list("expires_at", "created_at", "updated_at"))
    expiries = [expires for expires, _, _ in rows]
    assert expiries == sorted(expiries)
    assert all(expires > updated >= created for expires, created, updated in rows)


def test_a_seeded_key_behaves_like_any_other_in_the_store():
    call_command("seed", receipts=200, random_seed=5)
    receipt = seeding.seeded_receipts().filter(status="completed", expires_at__gt=timezone.now()).first()
    result = store.claim(receipt.scope, receipt.key, receipt.operation, fingerprint=receipt.fingerprint)
    assert result.outcome == "replayed"


def test_a_second_seed_adds_rows_without_key_collisions():
    call_command("seed", receipts=100)
    call_command("seed", receipts=100)
    assert seeding.seeded_receipts().count() == 200


def test_delete_removes_seeded_rows_and_nothing_else():
    mine = store.claim("client:shop", "seed_1", "payment.create", {"a": 1})  # a real key that looks seedy
    call_command("seed", receipts=150)
    call_command("seed", delete=True)
    assert not seeding.seeded_receipts().exists()
    assert Receipt.objects.filter(pk=mine.receipt.pk).exists()
    assert Attempt.objects.filter(scope="client:shop").count() == 1


def test_it_refuses_negative_counts():
    with pytest.raises(CommandError):
        call_command("seed", receipts=-1)


def test_it_seeds_outbox_messages_with_their_attempts():
    from receipts.outbox.models import OutboxAttempt, OutboxMessage

    call_command("seed", outbox=300, batch=100, random_seed=6)
    messages = seeding.seeded_outbox()
    assert messages.count() == 300
    statuses = Counter(messages.values_list("status", flat=True))
    assert statuses["sent"] > 200 and statuses["dead"] + statuses["retry"] > 0
    for message in messages.filter(status="sent")[:50]:
        log = list(OutboxAttempt.objects.filter(message=message).order_by("number"))
        assert len(log) == message.attempts and log[-1].outcome == "sent"
    call_command("seed", delete=True)
    assert not OutboxMessage.objects.exists() and not OutboxAttempt.objects.exists()


def test_the_purge_deletes_seeded_expired_receipts():
    from receipts import retention

    call_command("seed", receipts=100, expired=True)
    retention.purge()
    assert not seeding.seeded_receipts().exists()


def test_it_seeds_webhook_events_with_their_deliveries():
    from webhooks.models import WebhookDelivery, WebhookEndpoint

    real = WebhookEndpoint.objects.create(slug="stripe-live", provider="stripe")
    call_command("seed", events=300, batch=120, random_seed=7)
    events = seeding.seeded_events()
    assert events.count() == 300
    assert Counter(events.values_list("provider", flat=True)).keys() <= {"stripe", "shopify", "standard"}
    for event in events[:60]:
        assert WebhookDelivery.objects.filter(event=event).count() == event.delivery_count
    assert events.filter(delivery_count__gt=1).exists()
    call_command("seed", delete=True)
    assert not seeding.seeded_events().exists() and not WebhookDelivery.objects.exists()
    assert WebhookEndpoint.objects.filter(pk=real.pk).exists()


def test_seeding_past_deliveries_recounts_the_hours_the_delivery_roll_up_had_passed():
    from idemdash.dashboard import queries
    from idemdash.core import rollup
    from webhooks.models import DeliveryHourly, WebhookDelivery
    from webhooks.rollup import DELIVERIES

    rollup.catch_up()  # nothing yet: the watermark is at the settled instant
    assert DELIVERIES.rolled_until() is not None
    call_command("seed", events=200, random_seed=9)
    now = timezone.now()
    in_window = WebhookDelivery.objects.filter(received_at__gt=now - timedelta(days=30), received_at__lte=now)
    assert DeliveryHourly.objects.exists()
    assert queries.webhook_stats(queries.WINDOWS["30d"], now)["deliveries"] == in_window.count() > 200
    call_command("seed", delete=True)
    assert not DeliveryHourly.objects.exists()
    assert queries.webhook_stats(queries.WINDOWS["30d"])["deliveries"] == 0


def test_seeded_rows_are_written_in_time_order():
    call_command("seed", receipts=500, random_seed=8)
    created = list(seeding.seeded_receipts().order_by("id").values_list("created_at", flat=True))
    out_of_order = sum(1 for a, b in zip(created, created[1:]) if b < a - timedelta(hours=1))
    assert out_of_order < 20  # only the few live (just-claimed) receipts jump to now


def _index_definitions() -> set[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        # Each with whether it is valid (usable by queries).
        cursor.execute("SELECT pg_get_indexdef(indexrelid), indisvalid FROM pg_index WHERE indrelid = ANY(%s::regclass[])",
                       [[Receipt._meta.db_table, Attempt._meta.db_table]])
        return set(cursor.fetchall())


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_sql_seed_writes_its_receipts_and_attempts_and_gives_back_every_index_it_set_aside():
    # Into an empty log: the secondary indexes are dropped for the load and built after it.
    before = _index_definitions()
    counts = seeding.seed_receipts_sql(3000, chunk=1000)
    assert (counts.receipts, counts.attempts) == (3000, 9000)
    assert (seeding.seeded_receipts().count(), Attempt.objects.filter(key__startswith=seeding.PREFIX).count()) == (3000, 9000)
    assert _index_definitions() == before and all(valid for _, valid in before)
    # Fewer rows than the log holds: the indexes stay as they are.
    seeding.seed_receipts_sql(500)
    assert _index_definitions() == before and seeding.seeded_receipts().count() == 3500
