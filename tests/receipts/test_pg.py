"""receipts/pg.py: the PostgreSQL single-statement claim, replay and settle, on the prepared
cursor of idemdash/core/pg.py.

The rules themselves are proven for both paths by the rest of tests/receipts (which runs on
SQLite through the ORM and on PostgreSQL through these statements) and by test_rules.py,
which runs both paths side by side; the purge's statement is tested in test_retention.py.
Here: that the hot transitions really are one statement, write the same log lines, keep
the caller's commit synchronous, are prepared on persistent connections, and fall back
correctly when a concurrent insert is invisible to the statement.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from receipts import pg, store
from receipts.conf import policy_for
from receipts.models import Attempt, Receipt
from receipts.store import _Intent, _new_receipt
from tests.clock import held_clock
from tests.concurrently import until_transactions_wait_on_locks

pytestmark = pytest.mark.postgres

SCOPE = "client:fast"


def _statements(queries) -> list[str]:
    return [q["sql"] for q in queries.captured_queries]


def _log(key: str) -> list[tuple]:
    return list(
        Attempt.objects.filter(scope=SCOPE, key=key)
        .order_by("id")
        .values_list("receipt_id", "operation", "outcome", "fencing_token", "fingerprint", "request", "detail")
    )


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_claim_complete_and_replay_are_one_statement_each_with_their_log_lines():
    with CaptureQueriesContext(connection) as claim_q:
        first = store.claim(SCOPE, "k1", "email.send", {"to": "a@example.com"})
    assert first.outcome == "claimed" and first.token == 1
    assert len(_statements(claim_q)) == 1
    receipt = first.receipt
    assert receipt.pk and receipt.status == "processing" and receipt.request == {"to": "a@example.com"}
    assert Receipt.objects.get(pk=receipt.pk).lease_expires_at == receipt.lease_expires_at

    with CaptureQueriesContext(connection) as settle_q:
        store.complete(store.Held(SCOPE, "k1", first.token), response_status=201, content_type="text/plain", body="sent")
    assert len([s for s in _statements(settle_q) if "receipts_" in s]) == 1

    with CaptureQueriesContext(connection) as replay_q:
        again = store.claim(SCOPE, "k1", "email.send", {"to": "a@example.com"})
    assert len(_statements(replay_q)) == 1
    assert again.outcome == "replayed" and again.token is None
    assert (again.receipt.response_status, again.receipt.response_body) == (201, "sent")

    fp = receipt.fingerprint
    assert _log("k1") == [
        (receipt.pk, "email.send", "claimed", 1, fp, None, ""),
        (receipt.pk, "email.send", "completed", 1, "", None, ""),
        (receipt.pk, "email.send", "replayed", None, fp, None, ""),
    ]


@pytest.mark.django_db
def test_the_claim_statement_logs_the_time_spent_before_it_plus_its_own_up_to_the_decision():
    intent = _Intent(SCOPE, "k-timed", "email.send", None, "fp", policy_for("email.send"),
                     policy_for("email.send").lease, "", "")
    now = timezone.now()
    for expected in ("claimed", "replayed"):
        if expected == "replayed":
            Receipt.objects.filter(key="k-timed").update(status="completed", completed_at=now)
        logged, _ = pg.claim_or_replay(_new_receipt(intent, now), now, 40.0)
        assert logged == expected
        # The 40 ms the store spent before the statement, and the statement's own fraction of one.
        ms = Attempt.objects.get(key="k-timed", outcome=expected).claim_ms
        assert 40 < ms < 1040, ms


@pytest.mark.django_db
def test_a_burned_failure_replays_on_the_fast_path_and_a_mismatch_does_not():
    first = store.claim(SCOPE, "k2", "email.send", {"n": 1})
    store.fail(store.Held(SCOPE, "k2", first.token), error="boom", retryable=False)
    assert store.claim(SCOPE, "k2", "email.send", {"n": 1}).outcome == "replayed"
    mismatch = store.claim(SCOPE, "k2", "email.send", {"n": 2})
    assert mismatch.outcome == "mismatch"
    outcomes = [row[2] for row in _log("k2")]
    assert outcomes == ["claimed", "failed", "replayed", "mismatch"]
    # The mismatch's line keeps the rejected request, as on the ORM path.
    assert Attempt.objects.get(scope=SCOPE, key="k2", outcome="mismatch").request == {"n": 2}


@pytest.mark.django_db
def test_a_stale_token_settles_nothing_and_is_logged():
    first = store.claim(SCOPE, "k3", "email.send", {}, lease_seconds=1)
    Receipt.objects.filter(scope=SCOPE, key="k3").update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # it lapsed
    takeover = store.claim(SCOPE, "k3", "email.send", {})
    assert takeover.outcome == "lease_takeover"
    with pytest.raises(store.StaleToken):
        store.complete(store.Held(SCOPE, "k3", first.token), body="late")
    receipt = Receipt.objects.get(scope=SCOPE, key="k3")
    assert receipt.status == "processing" and receipt.response_body == ""
    assert [row[2:4] for row in _log("k3")][-1] == ("stale_token", first.token)


@pytest.mark.django_db(transaction=True)
def test_the_claim_commits_asynchronously_only_outside_a_callers_transaction():
    with CaptureQueriesContext(connection) as outside:
        store.claim(SCOPE, "k4", "email.send", {})
    assert "set_config('synchronous_commit', 'off', true)" in _statements(outside)[0]
    # Local to the claim's own statement: the connection's next commits stay synchronous.
    assert _synchronous_commit() == "on"

    with transaction.atomic():
        with CaptureQueriesContext(connection) as inside:
            store.claim(SCOPE, "k5", "email.send", {})
        # In the caller's transaction the setting would weaken the caller's own commit.
        assert "synchronous_commit" not in _statements(inside)[0]
        assert _synchronous_commit() == "on"


def _hold_uncommitted_insert(dsn: dict, key: str, fingerprint: str, status: str, holding: threading.Event,
                             release: threading.Event) -> None:
    with psycopg.connect(**dsn) as conn:
        conn.execute(
            """INSERT INTO receipts_receipt (scope, key, operation, fingerprint, request, status, retryable,
                   response_status, response_content_type, response_body, error, attempts, fencing_token,
                   lease_expires_at, created_at, updated_at, completed_at, expires_at, user_id, session_id)
               VALUES (%s, %s, 'email.send', %s, NULL, %s, true, 200, 'text/plain', 'theirs', '', 1, 1,
                   now() + interval '1 minute', now(), now(), now(), now() + interval '1 day', '', '')""",
            [SCOPE, key, fingerprint, status],
        )
        holding.set()
        release.wait(10)
        conn.commit()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("status,expected,logged", [("completed", "replayed", "waited"),
                                                     ("processing", "in_progress", "in_progress")])
def test_a_concurrent_insert_the_statement_cannot_see_falls_back_to_a_fresh_look(status, expected, logged, monkeypatch):
    """Our INSERT waits on the other transaction's uncommitted row, then does nothing; our
    SELECT's snapshot predates that row's commit, so the statement finds nothing at all.
    The claim must look again rather than report a claim or lose the key; a replay it then
    finds is of a result it waited for (as under ATOMIC_REQUESTS), logged `waited`."""
    key = f"race-{status}"
    fp = store.fingerprint_json({})
    settings = connection.settings_dict
    dsn = {"dbname": settings["NAME"], "user": settings["USER"], "host": settings["HOST"], "port": settings["PORT"] or 5432}
    holding, release = threading.Event(), threading.Event()
    other = threading.Thread(target=_hold_uncommitted_insert, args=(dsn, key, fp, status, holding, release))
    other.start()
    assert holding.wait(10)
    results = []

    def claim() -> None:
        try:
            results.append(store.claim(SCOPE, key, "email.send", {}))
        finally:
            connections.close_all()

    clock = held_clock(monkeypatch, store)
    claimer = threading.Thread(target=claim)
    claimer.start()
    until_transactions_wait_on_locks(1, "the claim blocked on the uncommitted row")
    assert not results
    clock.advance(600)  # ten minutes blocked, by the store's clock
    release.set()
    other.join(10)
    claimer.join(10)
    assert [r.outcome for r in results] == [expected]
    assert Receipt.objects.filter(scope=SCOPE, key=key).count() == 1
    assert [row[2] for row in _log(key)] == [logged]
    if logged == "waited":
        # The ten minutes it was blocked count as its wait, not also as the claim's time.
        (waited_ms, claim_ms), = Attempt.objects.filter(scope=SCOPE, key=key).values_list("waited_ms", "claim_ms")
        assert waited_ms >= 600_000 and claim_ms < 300_000, (waited_ms, claim_ms)



def _prepared_here() -> list[str]:
    """The statements prepared on this test's own connection (pg_prepared_statements is
    per session)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def persistent_connection(monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)


@pytest.mark.django_db
def test_on_a_persistent_connection_claim_and_settle_are_prepared_and_still_logged(persistent_connection):
    with CaptureQueriesContext(connection) as queries:
        first = store.claim(SCOPE, "p1", "email.send", {"n": 1})
        store.complete(store.Held(SCOPE, "p1", first.token), response_status=201, body="ok")
        again = store.claim(SCOPE, "p1", "email.send", {"n": 1})
    assert again.outcome == "replayed" and again.receipt.response_body == "ok"
    assert len([s for s in _statements(queries) if "receipts_receipt" in s]) == 3  # Django still logs them
    prepared = _prepared_here()
    assert any("ON CONFLICT (scope, key) DO NOTHING" in s for s in prepared)
    assert any("pg_notify" in s for s in prepared)
    assert [row[2] for row in _log("p1")] == ["claimed", "completed", "replayed"]


@pytest.mark.django_db
def test_nothing_is_prepared_on_a_connection_per_request_or_when_turned_off(monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    store.claim(SCOPE, "np1", "email.send", {"n": 1})
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    monkeypatch.setattr(connection.connection, "prepare_threshold", None)  # DB_PREPARED_STATEMENTS=false
    store.claim(SCOPE, "np2", "email.send", {"n": 1})
    assert not [s for s in _prepared_here() if "receipts_receipt" in s]


@pytest.mark.slow
def test_the_settings_allow_prepared_statements_unless_turned_off():
    import subprocess
    import sys

    def threshold(**env: str) -> str:
        code = "from django.conf import settings; print(settings.DATABASES['default']['OPTIONS'].get('prepare_threshold'))"
        done = subprocess.run([sys.executable, "-c", "import django; django.setup(); " + code], capture_output=True, text=True,
                              env={**os.environ, "DJANGO_SETTINGS_MODULE": "idemdash.settings", **env}, timeout=60)
        return done.stdout.strip()

    assert threshold() == "5"
    assert threshold(DB_PREPARED_STATEMENTS="false") == "None"


@pytest.mark.django_db(transaction=True)
def test_a_prepared_statement_on_a_lost_connection_raises_djangos_error_not_psycopgs(persistent_connection):
    from django.db import OperationalError

    store.claim(SCOPE, "lost0", "email.send", {"n": 0})
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with psycopg.connect(**{k: v for k, v in connection.get_connection_params().items()
                            if k in ("dbname", "user", "host", "port", "password")}, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    with pytest.raises(OperationalError):  # what receipts.middleware answers with a 503
        store.claim(SCOPE, "lost1", "email.send", {"n": 1})
    connection.close()


def test_the_fields_passed_as_is_are_those_django_would_pass_unchanged(db):
    # receipts/pg.py skips get_db_prep_save for a value that already has its field's plain
    # type; this holds only while Django returns such a value unchanged on PostgreSQL.
    from datetime import datetime, timezone as tz

    from receipts import pg

    samples = {str: "x", bool: True, datetime: datetime(2026, 11, 24, tzinfo=tz.utc)}
    checked = 0
    for name, plain, prepare in pg._preparers(tuple(f.name for f in pg._RECEIPT_FIELDS)):  # the claim's and the settle's
        if plain is None:
            continue
        value = samples[plain]
        assert prepare(value, connection) is value, f"{name}: Django now converts a {plain.__name__}"
        checked += 1
    assert checked >= 15  # the text, flag and time fields; not the integers nor the JSON request
