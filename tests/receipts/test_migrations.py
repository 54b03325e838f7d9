"""receipts/migrations/0010_session_reference.py: receipts written when a receipt recorded the
caller's session key take the keyed reference the code records now. 0011: the attempt log
gains `waited_ms` (empty for what was logged before) and a receipt may have no expiry. 0016
and 0017: the attempt log gains `claim_ms`, and its (created_at, outcome) index becomes
(created_at, outcome, claim_ms), built concurrently on PostgreSQL, both ways.

Each test migrates the test database back and leaves it migrated to the latest again, for
the tests that run after it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from receipts.decorators import session_reference
from receipts.models import Attempt, Receipt
from receipts.rollup import CLAIMS

BEFORE = ("receipts", "0009_exact_text")
REPLACING = ("receipts", "0010_session_reference")
WAITED_AND_PERMANENT = ("receipts", "0011_waited_outcome_and_permanent_receipts")
CLAIM_DURATIONS = ("receipts", "0016_hist_claim_durations")
CLAIM_DURATION_INDEX = ("receipts", "0017_hist_claim_duration_index")

pytestmark = pytest.mark.usefixtures("back_to_the_latest_migrations")


def _attempt_indexes() -> set[str]:
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Attempt._meta.db_table)
    return {name for name, c in constraints.items() if c["index"] and not c["primary_key"]}


@pytest.mark.django_db(transaction=True)
def test_migrating_replaces_each_stored_session_key_by_its_reference():
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    # Written as the receipts of that time were (today's store writes columns added since).
    receipts = executor.loader.project_state([BEFORE]).apps.get_model("receipts", "Receipt").objects
    now = timezone.now()
    for key, session_id in [("k-key", "sessionkey123"), ("k-none", ""), ("k-done", session_reference("other"))]:
        receipts.create(scope="user:1", key=key, operation="order.create", fingerprint="f", session_id=session_id,
                        created_at=now, updated_at=now, expires_at=now + timedelta(days=1), lease_expires_at=now)
    MigrationExecutor(connection).migrate([REPLACING])
    assert dict(Receipt.objects.values_list("key", "session_id")) == {
        "k-key": session_reference("sessionkey123"),
        "k-none": "",
        "k-done": session_reference("other"),  # already a reference: left alone
    }


@pytest.mark.django_db(transaction=True)
def test_attempts_logged_before_have_no_wait_and_a_receipt_may_then_be_permanent():
    executor = MigrationExecutor(connection)
    executor.migrate([REPLACING])
    old = executor.loader.project_state([REPLACING]).apps
    now = timezone.now()
    receipt = old.get_model("receipts", "Receipt").objects.create(
        scope="user:1", key="k", operation="email.send", fingerprint="f", created_at=now, updated_at=now,
        expires_at=now + timedelta(days=1), lease_expires_at=now)
    old.get_model("receipts", "Attempt").objects.create(
        receipt_id=receipt.pk, scope="user:1", key="k", operation="email.send", outcome="replayed", created_at=now)
    MigrationExecutor(connection).migrate([WAITED_AND_PERMANENT])
    assert list(Attempt.objects.values_list("outcome", "waited_ms")) == [("replayed", None)]
    # Only the columns this state has: later migrations add others (compacted_at).
    assert Receipt.objects.only("expires_at").get().expires_at == now + timedelta(days=1)
    Receipt.objects.filter(key="k").update(expires_at=None)
    assert Receipt.objects.only("expires_at").get().permanent


@pytest.mark.django_db(transaction=True)
def test_the_claim_duration_index_replaces_the_outcome_index_and_goes_back():
    executor = MigrationExecutor(connection)
    executor.migrate([CLAIM_DURATIONS])
    assert "attempt_age_outcome" in _attempt_indexes() and "attempt_age_outcome_claim" not in _attempt_indexes()
    MigrationExecutor(connection).migrate([CLAIM_DURATION_INDEX])
    assert "attempt_age_outcome_claim" in _attempt_indexes() and "attempt_age_outcome" not in _attempt_indexes()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = 'attempt_age_outcome_claim'::regclass")
            assert cursor.fetchone() == (True,)
            # The claim-duration roll-up's recount reads the index alone (no heap for the duration).
            for setting in ("enable_seqscan", "enable_bitmapscan"):
                cursor.execute(f"SET {setting} = off")
            recount = CLAIMS._logged({}, gte=timezone.now() - timedelta(hours=3)).values_list("bucket")
            sql, params = recount.query.sql_with_params()
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            for setting in ("enable_seqscan", "enable_bitmapscan"):
                cursor.execute(f"RESET {setting}")
        assert "Index Only Scan using attempt_age_outcome_claim" in plan, plan
    MigrationExecutor(connection).migrate([CLAIM_DURATIONS])
    assert "attempt_age_outcome" in _attempt_indexes() and "attempt_age_outcome_claim" not in _attempt_indexes()
