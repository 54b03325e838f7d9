"""Single-transaction mode (docs/http-contract.md: One transaction per request): the claim, the
view and the completion commit as one transaction.

What is proven, on the real database: while the view runs nothing of it is visible to another
connection (the claim is not committed on its own), and on PostgreSQL the receipt, its log
lines and the view's row carry one transaction id; an exception rolls all of it back and the
next attempt runs; a duplicate waits for the first attempt's commit and is replayed, or gets
409 when its wait ends first; a lapsed receipt left by the two-commit mode is taken over; and
under a real gunicorn with several worker processes, concurrent callers and SIGKILLed workers
leave exactly one effect per key. Refused: a view calling run_once, an outbox on another
database, MySQL/MariaDB (receipts.E016).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from datetime import timedelta

import httpx
import pytest
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, connections
from django.http import HttpResponse
from django.test import override_settings
from django.utils import timezone

import receipts
from receipts.decorators import idempotent
from receipts.models import Attempt, AuditEntry, Receipt
from tests.concurrently import assert_each_key_ran_once, same_keys_at_once
from tests.gunicorn import Gunicorn
from tests.waits import until

MYSQL = connection.vendor == "mysql"
not_on_mysql = pytest.mark.skipif(MYSQL, reason="refused on MySQL/MariaDB (receipts.E016)")
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


class _Hooks:
    """The views' hooks, imported when a test uses them: on MySQL/MariaDB the views' module
    itself is refused at import (the decorator says receipts.E016's reason)."""

    def __getitem__(self, name):
        from tests.receipts.single_transaction_urls import hooks

        return hooks[name]

    def __setitem__(self, name, value):
        from tests.receipts.single_transaction_urls import hooks

        hooks[name] = value

    def clear(self):
        if not MYSQL:
            from tests.receipts.single_transaction_urls import hooks

            hooks.clear()


hooks = _Hooks()


@pytest.fixture(autouse=True)
def _no_hooks():
    hooks.clear()
    yield
    hooks.clear()


def _effects(key: str) -> int:
    return AuditEntry.objects.filter(action="test.side_effect", object_id=key).count()


def _post(client, path: str, key: str, **headers: str):
    return client.post(path, data={"n": 1}, content_type="application/json",
                       headers={"Idempotency-Key": key, **headers})


def _seen_from_another_connection(key: str) -> dict[str, bool]:
    """What a second connection sees of the key while the view runs (another thread has its own)."""
    seen: dict[str, bool] = {}

    def look() -> None:
        try:
            seen["receipt"] = Receipt.objects.filter(key=key).exists()
            seen["effect"] = AuditEntry.objects.filter(action="test.side_effect", object_id=key).exists()
        finally:
            connections.close_all()

    thread = threading.Thread(target=look)
    thread.start()
    thread.join(30)
    return seen


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
@pytest.mark.parametrize("path", ["/single", "/single-async"])
def test_nothing_commits_before_the_view_returns(client, path):
    seen: dict[str, bool] = {}
    hooks["hold"] = lambda: seen.update(_seen_from_another_connection("one-commit"))
    response = _post(client, path, "one-commit")
    assert response.status_code == 201
    # In the default mode the claim is committed before the view runs: here it is not.
    assert seen == {"receipt": False, "effect": False}
    receipt = Receipt.objects.get(key="one-commit")
    assert receipt.status == Receipt.Status.COMPLETED
    assert _effects("one-commit") == 1
    assert _post(client, path, "one-commit").headers["Idempotent-Replayed"] == "true"
    assert _effects("one-commit") == 1


def _view_transaction_id() -> str:
    # The top-level transaction's id, also from inside the view's savepoint.
    with connection.cursor() as c:
        c.execute("SELECT pg_current_xact_id()::text")
        return c.fetchone()[0]


def _claim_line_transaction_id(key: str) -> str:
    with connection.cursor() as c:
        c.execute(f"SELECT xmin::text FROM {Attempt._meta.db_table} WHERE key = %s AND outcome = 'claimed'", [key])
        return c.fetchone()[0]


@pytest.mark.urls("tests.receipts.single_transaction_urls")
@pytest.mark.skipif(connection.vendor != "postgresql", reason="transaction ids are PostgreSQL's")
def test_on_postgresql_the_claim_was_written_by_the_views_own_transaction(client):
    seen: list[str] = []
    hooks["hold"] = lambda: seen.append(_view_transaction_id())
    assert _post(client, "/single", "xid").status_code == 201
    assert _claim_line_transaction_id("xid") == seen[0]
    # The default mode commits the claim first, in a transaction of its own.
    assert _post(client, "/single-policy", "xid-two-commits").status_code == 201
    assert _claim_line_transaction_id("xid-two-commits") != seen[1]


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_the_operations_policy_turns_it_on_and_the_decorator_can_say_otherwise(client):
    seen: dict[str, bool] = {}
    hooks["hold"] = lambda: seen.update(_seen_from_another_connection("by-policy"))
    with override_settings(RECEIPTS_OPERATIONS={"ledger.*": {"single_transaction": True}}):
        assert _post(client, "/single-policy", "by-policy").status_code == 201
    assert seen == {"receipt": False, "effect": False}
    # Without the policy the same view commits its claim first.
    seen.clear()
    hooks["hold"] = lambda: seen.update(_seen_from_another_connection("two-commits"))
    assert _post(client, "/single-policy", "two-commits").status_code == 201
    assert seen == {"receipt": True, "effect": False}


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_an_exception_rolls_back_the_claim_too_so_the_next_attempt_runs(client):
    client.raise_request_exception = False
    assert client.post("/single?explode=1", data={}, content_type="application/json",
                       headers={"Idempotency-Key": "boom"}).status_code == 500
    assert not Receipt.objects.filter(key="boom").exists()
    assert not Attempt.objects.filter(key="boom").exists()
    assert _effects("boom") == 0
    assert _post(client, "/single", "boom").status_code == 201
    assert _effects("boom") == 1
    assert list(Attempt.objects.filter(key="boom").values_list("outcome", flat=True).order_by("id")) == [
        "claimed", "completed"
    ]


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_a_5xx_answer_is_stored_as_the_failure_without_the_views_writes(client):
    response = client.post("/single?status=503", data={}, content_type="application/json",
                           headers={"Idempotency-Key": "five-oh-three"})
    assert response.status_code == 503
    assert Receipt.objects.get(key="five-oh-three").status == Receipt.Status.FAILED
    assert _effects("five-oh-three") == 0


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_a_5xx_is_stored_after_the_rollback_as_a_retryable_failure_and_the_retry_runs(client):
    # Without a savepoint the 5xx rolls back the claim with the view's writes; the failure is
    # then claimed and stored in a transaction of its own, with its log lines.
    hooks["status"] = lambda: 500
    assert _post(client, "/single", "fails-then-runs").status_code == 500
    hooks.clear()
    receipt = Receipt.objects.get(key="fails-then-runs")
    assert (receipt.status, receipt.retryable, receipt.response_status) == (Receipt.Status.FAILED, True, 500)
    assert _effects("fails-then-runs") == 0
    assert _post(client, "/single", "fails-then-runs").status_code == 201
    assert _effects("fails-then-runs") == 1
    assert list(Attempt.objects.filter(key="fails-then-runs").values_list("outcome", flat=True).order_by("id")) == [
        "claimed", "failed", "retried_after_failure", "completed"
    ]


@not_on_mysql
@pytest.mark.parametrize("duplicate", ["completed", "running", "failed, retryable", "none"])
def test_a_5xx_stored_after_the_rollback_defers_to_a_duplicate_that_took_the_key_meanwhile(duplicate):
    """Between the rollback and the failure's own claim a duplicate that waited on the row can
    take the key. The failure is then not stored, and its claim logs nothing: before, a
    duplicate that had completed already was answered, in the log, by a replay nobody got."""
    from receipts import store
    from receipts.decorators import _fail_afresh

    def claim(**options):
        return store.claim("s", "k", "op", {"n": 1}, fingerprint="f", **options)

    if duplicate != "none":
        other = claim()
        if duplicate == "completed":
            store.complete("s", "k", other.token, response_status=201, body="{}")
        elif duplicate == "failed, retryable":
            store.fail("s", "k", other.token, error="HTTP 503", response_status=503)
    before = list(Attempt.objects.filter(key="k").values_list("outcome", flat=True).order_by("id"))
    _fail_afresh(claim, "s", "k", HttpResponse(status=500), None)
    added = list(Attempt.objects.filter(key="k").values_list("outcome", flat=True).order_by("id"))[len(before):]
    receipt = Receipt.objects.get(key="k")
    if duplicate in ("completed", "running"):
        assert added == [] and receipt.status == ("completed" if duplicate == "completed" else "processing")
    else:  # the key was free to claim: this failure is the latest attempt's
        assert added == (["claimed", "failed"] if duplicate == "none" else ["retried_after_failure", "failed"])
        assert (receipt.status, receipt.response_status) == ("failed", 500)


@pytest.mark.skipif(connection.vendor != "postgresql",
                    reason="needs a second connection to commit while the failure's transaction is open: "
                           "SQLite's IMMEDIATE transaction excludes it, MySQL/MariaDB are refused (receipts.E016)")
def test_a_duplicate_that_completes_as_the_failure_claims_leaves_no_replay_in_the_log():
    """The duplicate completes the key after the failure's transaction began and before its
    claim: the claim replays the result and is rolled back with its line (before, a look at the
    key came first, and a completion just after it left a `replayed` line nobody received)."""
    from receipts import store
    from receipts.decorators import _fail_afresh

    def duplicate():
        try:
            other = store.claim("s", "k", "op", {"n": 1}, fingerprint="f")
            store.complete("s", "k", other.token, response_status=201, body="{}")
        finally:
            connection.close()

    def claim(**options):  # inside the failure's transaction, before its claim statement
        racer = threading.Thread(target=duplicate)
        racer.start()
        racer.join(30)
        return store.claim("s", "k", "op", {"n": 1}, fingerprint="f", **options)

    _fail_afresh(claim, "s", "k", HttpResponse(status=500), None)
    assert list(Attempt.objects.filter(key="k").values_list("outcome", flat=True).order_by("id")) == [
        "claimed", "completed"
    ]
    assert Receipt.objects.get(key="k").status == "completed"


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_under_burn_the_5xx_commits_with_its_claim_in_the_same_transaction_and_is_replayed(client):
    # "on_failure": "burn" keeps the view's savepoint: the burned failure commits with the
    # claim, so a duplicate waiting on the row replays it rather than running.
    policy = {"ledger.*": {"single_transaction": True, "on_failure": "burn"}}
    with override_settings(RECEIPTS_OPERATIONS=policy):
        hooks["status"] = lambda: 503
        first = _post(client, "/single-policy", "burned")
        hooks.clear()
        again = _post(client, "/single-policy", "burned")
    assert first.status_code == 503
    receipt = Receipt.objects.get(key="burned")
    assert (receipt.status, receipt.retryable) == (Receipt.Status.FAILED, False)
    assert again.status_code == 503
    assert again.headers["Idempotent-Replayed"] == "true"
    assert _effects("burned") == 0
    if connection.vendor == "postgresql":
        with connection.cursor() as c:
            c.execute(f"SELECT count(DISTINCT xmin::text) FROM {Attempt._meta.db_table} WHERE key = 'burned' "
                      "AND outcome IN ('claimed', 'failed')")
            assert c.fetchone()[0] == 1  # claimed and failed by the request's one transaction


@pytest.mark.urls("tests.receipts.single_transaction_urls")
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the statements are PostgreSQL's")
def test_on_postgresql_a_replay_is_one_statement_and_a_first_attempt_has_no_savepoint(client):
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as first:
        assert _post(client, "/single", "counted").status_code == 201
    statements = [q["sql"].split()[0].upper() for q in first.captured_queries]
    assert "SAVEPOINT" not in statements and "RELEASE" not in statements, statements
    in_transaction: list[bool] = []

    def note(execute, sql, params, many, context):
        in_transaction.append(connection.in_atomic_block)
        return execute(sql, params, many, context)

    with CaptureQueriesContext(connection) as replay, connection.execute_wrapper(note):
        response = _post(client, "/single", "counted")
    assert response.headers["Idempotent-Replayed"] == "true"
    # One statement, outside any transaction: no BEGIN, and no durable COMMIT for a log line.
    assert len(replay.captured_queries) == 1, replay.captured_queries
    assert "'replayed'" in replay.captured_queries[0]["sql"]
    assert in_transaction == [False]
    assert list(Attempt.objects.filter(key="counted").values_list("outcome", flat=True).order_by("id")) == [
        "claimed", "completed", "replayed"
    ]


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_a_lapsed_receipt_of_the_two_commit_mode_is_taken_over(client):
    response = _post(client, "/single", "lapsed")
    assert response.status_code == 201
    receipt = Receipt.objects.get(key="lapsed")
    # Lapse it as a crashed two-commit attempt would leave it, then claim again.
    Receipt.objects.filter(pk=receipt.pk).update(
        status=Receipt.Status.PROCESSING, lease_expires_at=timezone.now() - timedelta(seconds=5)
    )
    assert _post(client, "/single", "lapsed").status_code == 201
    receipt.refresh_from_db()
    assert receipt.status == Receipt.Status.COMPLETED
    assert receipt.fencing_token == 2
    assert Attempt.objects.filter(key="lapsed", outcome="lease_takeover").count() == 1
    assert _effects("lapsed") == 2  # the takeover ran the view again, as a lapsed lease means


@pytest.mark.urls("tests.receipts.single_transaction_urls")
@pytest.mark.skipif(connection.vendor != "postgresql", reason="the bounded wait is PostgreSQL's lock_timeout")
def test_a_duplicate_that_waits_longer_than_its_bound_gets_409_and_nothing_is_written(client):
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        inside.set()
        release.wait(30)

    hooks["hold"] = hold
    answers = {}

    def first() -> None:
        from django.test import Client

        try:
            answers["first"] = _post(Client(), "/single", "slow")
        finally:
            connections.close_all()

    thread = threading.Thread(target=first)
    thread.start()
    assert inside.wait(30)
    hooks.clear()
    started = time.monotonic()
    duplicate = _post(client, "/single", "slow", Prefer="wait=1")
    waited = time.monotonic() - started
    assert duplicate.status_code == 409
    assert duplicate["Content-Type"] == "application/problem+json"
    assert duplicate.json()["type"].endswith("request-in-progress")
    assert waited >= 0.9  # it did wait on the row, up to its bound
    release.set()
    thread.join(30)
    assert answers["first"].status_code == 201
    replay = _post(client, "/single", "slow")
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.content == answers["first"].content
    assert _effects("slow") == 1
    # The bound was the request's transaction's alone (SET LOCAL): the connection's own is back.
    with connection.cursor() as c:
        c.execute("SHOW lock_timeout")
        assert c.fetchone()[0] == "0"


def test_a_view_calling_run_once_is_refused_when_decorated():
    def view(request):
        return receipts.run_once("k", "email.send", lambda: None)

    with pytest.raises(ImproperlyConfigured, match="run_once"):
        idempotent("email.send", single_transaction=True)(view)
    idempotent("email.send")(view)  # the default mode allows it


@not_on_mysql
@pytest.mark.urls("tests.receipts.single_transaction_urls")
def test_run_once_under_a_single_transaction_view_is_refused_at_run_time(client):
    # Called through a helper, out of sight of the decorator's look at the view's code.
    hooks["hold"] = lambda: receipts.run_once("inner", "email.send", lambda: 1)
    with pytest.raises(ImproperlyConfigured, match="single-transaction"):
        _post(client, "/single", "nested")
    assert not Receipt.objects.filter(key__in=["nested", "inner"]).exists()
    assert _effects("nested") == 0


class _OutboxElsewhere:
    def db_for_write(self, model, **hints):
        return "outbox_db" if model._meta.app_label == "outbox" else None


@not_on_mysql
def test_an_outbox_on_another_database_is_refused_at_decoration_and_by_check():
    with override_settings(DATABASE_ROUTERS=[f"{__name__}._OutboxElsewhere"]):
        with pytest.raises(ImproperlyConfigured, match="outbox"):
            idempotent("email.send", single_transaction=True)(lambda request: None)
        with override_settings(RECEIPTS_OPERATIONS={"email.send": {"single_transaction": True}}):
            errors = [e for e in run_checks() if e.id == "receipts.E016"]
    assert len(errors) == 1 and "outbox" in errors[0].msg
    # With both on one database, nothing to say.
    with override_settings(RECEIPTS_OPERATIONS={"email.send": {"single_transaction": True}}):
        assert [e for e in run_checks() if e.id == "receipts.E016"] == []


@pytest.mark.skipif(not MYSQL, reason="MySQL/MariaDB's refusal")
def test_mysql_refuses_the_mode_by_check_and_at_decoration():
    with override_settings(RECEIPTS_OPERATIONS={"email.send": {"single_transaction": True}}):
        errors = [e for e in run_checks() if e.id == "receipts.E016"]
    assert len(errors) == 1 and "MySQL" in errors[0].msg
    with pytest.raises(ImproperlyConfigured, match="MySQL"):
        idempotent("email.send", single_transaction=True)(lambda request: None)


def test_a_policy_value_that_is_not_a_bool_is_refused_by_check():
    with override_settings(RECEIPTS_OPERATIONS={"email.send": {"single_transaction": "yes"}}):
        errors = [e for e in run_checks() if e.id == "receipts.E006"]
    assert any("single_transaction" in e.msg for e in errors)


# --- Real processes ------------------------------------------------------------------------

KEYS = [f"single-{i}" for i in range(4)]
CALLERS_PER_KEY = 16


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    if MYSQL:
        pytest.skip("refused on MySQL/MariaDB (receipts.E016)")
    with django_db_blocker.unblock():
        server = Gunicorn(
            tmp_path_factory.mktemp("gunicorn") / "gunicorn.log", "tests.receipts.single_transaction_settings",
            workers=4,
        )
    yield server
    server.stop()


@pytest.mark.slow
def test_concurrent_callers_in_several_processes_get_one_effect_per_key(gunicorn):
    answers = same_keys_at_once(
        lambda key: httpx.post(gunicorn.url + "/single?sleep=0.3", json={"n": 1}, headers={"Idempotency-Key": key},
                               timeout=60),
        KEYS, CALLERS_PER_KEY,
    )
    assert_each_key_ran_once(answers, KEYS, CALLERS_PER_KEY, gunicorn.log())
    outcomes = Counter(Attempt.objects.filter(key__in=KEYS).values_list("outcome", flat=True))
    # Never a 409 nor a takeover: the duplicates waited on the uncommitted row.
    assert outcomes["claimed"] == outcomes["completed"] == len(KEYS)
    assert not {"in_progress", "lease_takeover"} & set(outcomes)


@pytest.mark.slow
def test_a_worker_killed_mid_view_leaves_nothing_and_the_retry_runs_once(gunicorn, tmp_path):
    for round_no in range(3):
        key = f"killed-{round_no}"
        pid_file = tmp_path / f"pid-{round_no}"
        first = threading.Thread(target=lambda: _quietly(gunicorn.url + f"/single?pid_file={pid_file}", key))
        first.start()
        pid = int(until(lambda: pid_file.exists() and pid_file.read_text(), "the view writes its pid", log=gunicorn.log_path))
        # Its effect is written and its claim made, neither committed: SIGKILL it now.
        os.kill(pid, signal.SIGKILL)
        first.join(60)
        retry = httpx.post(gunicorn.url + "/single", json={"n": 1}, headers={"Idempotency-Key": key}, timeout=60)
        assert retry.status_code == 201, gunicorn.log()
        assert "Idempotent-Replayed" not in retry.headers  # nothing of the killed attempt was kept
        assert _effects(key) == 1
        assert Counter(Attempt.objects.filter(key=key).values_list("outcome", flat=True)) == {
            "claimed": 1, "completed": 1
        }


def _quietly(url: str, key: str) -> None:
    try:
        httpx.post(url, json={"n": 1}, headers={"Idempotency-Key": key}, timeout=60)
    except httpx.HTTPError:
        pass  # its worker was killed
