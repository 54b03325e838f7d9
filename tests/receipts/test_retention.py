from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta

import pytest
import time_machine
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from idemdash.core import audit
from idemdash.core import retention as core_retention
from idemdash.core import rollup
from receipts import retention, store
from idemdash.core.models import AuditEntry
from receipts.models import ArchivedReceipt, Attempt, AttemptHourly, Receipt, ReceiptReference
from receipts.outbox import store as outbox
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from tests.concurrently import in_a_thread

SCOPE = "client:test"


def completed_receipt(key: str, operation: str = "email.send", *, age: timedelta) -> Receipt:
    with time_machine.travel(timezone.now() - age, tick=False):
        result = store.claim(SCOPE, key, operation, {"key": key})
        store.complete(store.Held(SCOPE, key, result.token), response_status=201, body=f'{{"id": "{key}"}}')
    return Receipt.objects.get(key=key)


def expired_receipts(count: int, operation: str = "email.send", prefix: str = "old") -> list[str]:
    keys = [f"{prefix}-{n}" for n in range(count)]
    for key in keys:
        completed_receipt(key, operation, age=timedelta(days=8))  # past both TTLs
    return keys


def only(name: str) -> list[core_retention.Purger]:
    return [p for p in core_retention.installed_purgers() if p.name == name]


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
def test_a_permanent_receipt_is_never_purged(settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}, "payment.welcome_bonus": {"ttl_seconds": None}}
    expired_receipts(3)
    welcome = completed_receipt("welcome:1", "email.welcome", age=timedelta(days=3650))
    bonus = completed_receipt("bonus:1", "payment.welcome_bonus", age=timedelta(days=3650))  # financial, too
    # Not even counted as due: the purge (PostgreSQL's statement or the generic batch) never sees it.
    assert set(retention.due_receipts(timezone.now()).values_list("key", flat=True)) == {"old-0", "old-1", "old-2"}
    (result,) = retention.purge(purgers=only("receipts.expired"))
    assert (result.due, result.deleted, result.archived) == (3, 3, 0)
    assert set(Receipt.objects.values_list("pk", flat=True)) == {welcome.pk, bonus.pk}
    assert not ArchivedReceipt.objects.exists()


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

    purger = core_retention.Purger("receipts.expired", retention.due_receipts, archive=archive_then_fail)
    with pytest.raises(RuntimeError):
        retention.purge(purgers=[purger])
    assert Receipt.objects.count() == 2 and not ArchivedReceipt.objects.exists()


def refuse_deleting_receipts() -> None:
    """A trigger that fails every DELETE on the receipts table: a real database error."""
    table = Receipt._meta.db_table
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'receipts are not to be deleted'; END $$"
            )
            cursor.execute(f"CREATE TRIGGER refuse_delete BEFORE DELETE ON {table} FOR EACH ROW EXECUTE FUNCTION refuse_delete()")
        else:
            cursor.execute(
                f"CREATE TRIGGER refuse_delete BEFORE DELETE ON {table} "
                "BEGIN SELECT RAISE(ABORT, 'receipts are not to be deleted'); END"
            )


@pytest.mark.django_db
def test_a_delete_that_fails_takes_its_batch_archive_with_it():
    if connection.vendor == "mysql":
        pytest.skip("MySQL commits CREATE TRIGGER on the spot, and with it the test's own rows")
    expired_receipts(2, "payment.capture")
    refuse_deleting_receipts()
    with pytest.raises(DatabaseError, match="not to be deleted"):
        retention.purge(purgers=only("receipts.expired"))
    assert Receipt.objects.count() == 2 and not ArchivedReceipt.objects.exists()


def expired_log(receipts: int, attempts_each: int, prefix: str) -> None:
    """Expired receipts, half of them financial, each with `attempts_each` replays logged."""
    past = timezone.now() - timedelta(days=8)
    made = Receipt.objects.bulk_create(
        Receipt(scope=SCOPE, key=f"{prefix}-{n}", operation=("payment.capture", "email.send")[n % 2],
                fingerprint="f", status="completed", response_status=201, response_body="{}",
                created_at=past, updated_at=past, expires_at=past + timedelta(days=1))
        for n in range(receipts)
    )
    Attempt.objects.bulk_create(
        Attempt(receipt=r, scope=SCOPE, key=r.key, operation=r.operation, outcome="replayed", created_at=past)
        for r in made for _ in range(attempts_each)
    )


def statements_of_one_batch(receipts: int, attempts_each: int) -> list[str]:
    expired_log(receipts, attempts_each, prefix=f"log{receipts}")
    attempts = Attempt.objects.count()
    with CaptureQueriesContext(connection) as queries:
        result = core_retention.purge_batches(only("receipts.expired")[0], timezone.now(), batch_size=receipts, max_batches=1)
    assert (result.batches, result.deleted, result.archived) == (1, receipts, receipts // 2)
    assert Attempt.objects.count() == attempts  # the log stays, untouched
    return [q["sql"] for q in queries]


@pytest.mark.django_db
def test_a_batch_takes_the_same_few_statements_however_many_receipts_and_attempts_it_has():
    small = statements_of_one_batch(2, attempts_each=1)
    large = statements_of_one_batch(400, attempts_each=8)
    # 7: the receipts' references (which cascade) are one more DELETE, keyed by the batch.
    assert len(large) == len(small) <= 7
    # Nothing touches the attempt log, and no receipt is loaded into Python (Django's
    # collector would SELECT the batch's rows, bodies included, then delete by 100s).
    assert not [sql for sql in large if Attempt._meta.db_table in sql]
    assert not [sql for sql in large if sql.startswith("SELECT") and "response_body" in sql]


@pytest.mark.postgres
@pytest.mark.django_db
def test_on_postgresql_a_batch_of_expired_receipts_is_two_statements_and_archives_what_it_deletes():
    sql = [q for q in statements_of_one_batch(300, attempts_each=2) if "SAVEPOINT" not in q]
    # Lock the ids (with their operations), then DELETE ... RETURNING into the archive.
    assert len(sql) == 2
    assert sql[0].startswith("SELECT") and "FOR UPDATE SKIP LOCKED" in sql[0] and "response_body" not in sql[0]
    assert "DELETE" in sql[1] and ArchivedReceipt._meta.db_table in sql[1]
    archived = ArchivedReceipt.objects.order_by("original_id")
    assert {a.operation for a in archived} == {"payment.capture"}
    assert archived[0].response_body == "{}" and archived[0].archived_at is not None


@pytest.mark.postgres
@pytest.mark.django_db
def test_on_postgresql_a_batch_without_financial_receipts_is_a_plain_delete():
    expired_receipts(3, "email.send")
    with CaptureQueriesContext(connection) as queries:
        (result,) = retention.purge(purgers=only("receipts.expired"))
    assert (result.deleted, result.archived) == (3, 0)
    sql = [q["sql"] for q in queries if "SAVEPOINT" not in q["sql"]]
    # The count, the lock, the delete (of the receipts and, in the same statement, their references).
    assert [s.split()[0] for s in sql[:2]] == ["SELECT", "SELECT"] and len(sql) == 3
    assert sql[2].startswith("WITH refs AS (DELETE FROM") and ArchivedReceipt._meta.db_table not in sql[2]
    assert not Receipt.objects.exists() and not ArchivedReceipt.objects.exists()


def test_only_a_model_nothing_else_follows_is_deleted_alone():
    from webhooks.models import WebhookEvent

    assert not core_retention._deletes_alone(Receipt)  # its references cascade...
    assert core_retention._deletes_alone(Receipt, (ReceiptReference,))  # ...unless the batch deletes them; attempts: DO_NOTHING
    assert not core_retention._deletes_alone(OutboxMessage)  # its attempts are set to NULL
    assert not core_retention._deletes_alone(WebhookEvent)  # its deliveries cascade


@pytest.mark.django_db
def test_old_attempts_go_with_one_delete_statement(settings):
    settings.RECEIPTS_ATTEMPT_RETENTION_DAYS = 35
    with time_machine.travel(timezone.now() - timedelta(days=36)):
        expired_log(50, attempts_each=4, prefix="ancient")
    with CaptureQueriesContext(connection) as queries:
        result = core_retention.purge_batches(only("receipts.attempts")[0], timezone.now(), batch_size=1000)
    assert result.deleted == 200 and not Attempt.objects.exists()
    deletes = [q["sql"] for q in queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 1 and Attempt._meta.db_table in deletes[0]


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
    assert Attempt.objects.exclude(receipt_id__in=Receipt.objects.values("pk")).count() == 4 * 3  # kept


@pytest.mark.django_db
def test_attempts_keep_the_id_of_their_purged_receipt_and_their_own_scope_and_key():
    gone = completed_receipt("gone", age=timedelta(days=2))
    (result,) = retention.purge(purgers=only("receipts.expired"))
    assert result.deleted == 1 and not Receipt.objects.exists()
    log = Attempt.objects.filter(key="gone")
    assert set(log.values_list("receipt_id", "scope", "operation")) == {(gone.pk, SCOPE, "email.send")}
    assert log.count() == 2  # claimed, completed


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
    from idemdash.dashboard import queries

    assert queries.receipt_stats(queries.WINDOWS["30d"])["claimed"] == 1


@pytest.mark.django_db
def test_audit_entries_are_kept_for_the_audit_retention_period(settings, admin_user):
    settings.RECEIPTS_AUDIT_RETENTION_DAYS = 365
    receipt = completed_receipt("audited", age=timedelta(hours=1))
    for age in (timedelta(days=366), timedelta(days=364)):
        with time_machine.travel(timezone.now() - age, tick=False):
            audit.record("ada", "receipt.release", receipt, user=admin_user, detail=f"{age.days} days ago")
    (result,) = retention.purge(purgers=only("receipts.audit"))
    assert result.deleted == 1
    assert list(AuditEntry.objects.values_list("detail", flat=True)) == ["364 days ago"]


@pytest.mark.django_db
def test_finished_and_cancelled_bulk_runs_go_after_their_window_with_their_items_and_the_audit_log_stays(settings):
    from idemdash.core.bulk_runs import BulkItem, BulkRun

    settings.RECEIPTS_BULK_RUN_RETENTION_DAYS = 90
    now = timezone.now()

    def run(title: str, status: str, days: int) -> BulkRun:
        at = now - timedelta(days=days)
        made = BulkRun.objects.create(title=title, status=status, kind="message", actor="otto", total=2,
                                      created_at=at, updated_at=at)
        BulkItem.objects.bulk_create([BulkItem(run=made, object_id=i, name=f"m-{i}") for i in (1, 2)])
        AuditEntry.objects.create(actor="otto", action="outbox_message.send_again", object_type="outbox.outboxmessage",
                                  object_id="1", run=made, detail=title, created_at=at)
        return made

    run("finished long ago", "finished", 91)
    run("cancelled long ago", "cancelled", 91)
    run("finished lately", "finished", 89)
    run("queued long ago", "queued", 200)  # still the worker's: resume_stalled hands it on
    run("running long ago", "running", 200)

    (result,) = retention.purge(purgers=only("receipts.bulk_runs"))
    assert (result.due, result.deleted) == (2, 2)
    assert sorted(BulkRun.objects.values_list("title", flat=True)) == [
        "finished lately", "queued long ago", "running long ago"]
    assert BulkItem.objects.count() == 6  # the purged runs' items went with them
    # What each run did stays on record, no longer linked to the purged run.
    assert AuditEntry.objects.filter(action="outbox_message.send_again").count() == 5
    assert sorted(AuditEntry.objects.filter(run=None).values_list("detail", flat=True)) == [
        "cancelled long ago", "finished long ago"]


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
        with transaction.atomic():
            list(Receipt.objects.select_for_update().filter(pk=held))
            locked.set()
            done.wait(20)

    with in_a_thread(hold_row, done, join=10):
        assert locked.wait(10)
        (result,) = retention.purge(purgers=only("receipts.expired"))
    assert result.deleted == 2
    assert list(Receipt.objects.values_list("pk", flat=True)) == [held]
    assert connection.vendor == "postgresql"


@pytest.mark.django_db
def test_a_batch_of_sent_messages_unlinks_its_attempt_log_with_one_update(settings):
    settings.OUTBOX_SENT_RETENTION_DAYS = 7
    with time_machine.travel(timezone.now() - timedelta(days=8), tick=False):
        for n in range(5):
            outbox.enqueue("http.post", {"url": "https://example.com/"}, f"sent-{n}")
        for message in outbox.claim_batch("d"):
            outbox.mark_sent(message)
    with CaptureQueriesContext(connection) as queries:
        (result,) = retention.purge(purgers=only("outbox.sent"))
    assert result.deleted == 5 and OutboxAttempt.objects.filter(message=None).count() == 5
    statements = [q["sql"] for q in queries]
    assert sum(sql.startswith("UPDATE") for sql in statements) == 1
    # Django's collector would load every message, payload included, before deleting it.
    assert not [sql for sql in statements if sql.startswith("SELECT") and '"payload"' in sql]


@pytest.mark.django_db
def test_a_batch_deletes_the_references_of_the_receipts_it_purges_and_only_theirs():
    expired_receipts(3, "payment.capture")
    kept = store.claim("client:shop", "kept", "email.send").receipt
    for receipt in Receipt.objects.all():
        ReceiptReference.store(receipt.pk, [("order", receipt.key)])
    (result,) = retention.purge(purgers=only("receipts.expired"))
    assert result.deleted == 3
    assert list(ReceiptReference.objects.values_list("receipt_id", flat=True)) == [kept.pk]
