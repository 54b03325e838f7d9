from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from idemdash.core import leases
from receipts import store
from receipts.models import Attempt, Receipt
from tests.concurrently import uncommitted, until_transactions_wait_on_locks

pytestmark = pytest.mark.django_db

SCOPE = "client:test"


def outcomes(key: str) -> list[str]:
    return list(Attempt.objects.filter(key=key).order_by("id").values_list("outcome", flat=True))


def test_a_new_key_is_claimed_with_a_lease_and_a_fencing_token():
    result = store.claim(SCOPE, "k1", "email.send", {"to": "a@example.com"})
    assert result.outcome == "claimed" and result.owned
    assert result.token == 1
    r = Receipt.objects.get(key="k1")
    assert r.status == "processing"
    assert r.lease_expires_at > timezone.now()
    assert r.expires_at - r.created_at == timedelta(hours=24)


def test_a_completed_key_replays_its_stored_result():
    first = store.claim(SCOPE, "k2", "email.send", {"a": 1, "b": 2})
    store.complete(store.Held(SCOPE, "k2", first.token), response_status=201, content_type="application/json", body='{"id":7}')
    again = store.claim(SCOPE, "k2", "email.send", {"b": 2, "a": 1})  # same JSON, other key order
    assert again.outcome == "replayed" and not again.owned
    assert again.receipt.response_status == 201
    assert again.receipt.response_body == '{"id":7}'
    assert outcomes("k2") == ["claimed", "completed", "replayed"]


def test_a_processing_key_with_a_live_lease_is_in_progress():
    store.claim(SCOPE, "k3", "email.send", {})
    second = store.claim(SCOPE, "k3", "email.send", {})
    assert second.outcome == "in_progress"
    assert 1 <= second.retry_after <= 10


def test_reusing_a_key_with_a_different_request_is_a_mismatch_and_keeps_the_rejected_request():
    store.claim(SCOPE, "k4", "email.send", {"to": "a"})
    second = store.claim(SCOPE, "k4", "email.send", {"to": "b"})
    assert second.outcome == "mismatch"
    rejected = Attempt.objects.get(key="k4", outcome="mismatch")
    assert rejected.request == {"to": "b"}


def test_a_failed_key_is_retried_by_the_next_claim_with_a_new_token():
    first = store.claim(SCOPE, "k5", "email.send", {})
    store.fail(store.Held(SCOPE, "k5", first.token), error="smtp down")
    second = store.claim(SCOPE, "k5", "email.send", {})
    assert second.outcome == "retried_after_failure"
    assert second.token == first.token + 1
    assert second.receipt.attempts == 2


def test_a_burning_operation_replays_its_failure(settings):
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}
    first = store.claim(SCOPE, "k6", "ledger.post", {})
    store.fail(store.Held(SCOPE, "k6", first.token), error="rejected by ledger")
    second = store.claim(SCOPE, "k6", "ledger.post", {})
    assert second.outcome == "replayed"
    assert second.receipt.status == "failed" and second.receipt.error == "rejected by ledger"


def test_financial_operations_live_seven_days():
    result = store.claim(SCOPE, "k7", "payment.capture", {})
    assert result.receipt.expires_at - result.receipt.created_at == timedelta(days=7)


def test_an_expired_lease_is_taken_over_and_the_slow_worker_is_refused():
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        slow = store.claim(SCOPE, "k8", "email.send", {}, lease_seconds=30)
        traveller.shift(timedelta(seconds=31))
        fast = store.claim(SCOPE, "k8", "email.send", {})
        assert fast.outcome == "lease_takeover"
        assert fast.token == slow.token + 1
        store.complete(store.Held(SCOPE, "k8", fast.token), body="fast")
        with pytest.raises(store.StaleToken):
            store.complete(store.Held(SCOPE, "k8", slow.token), body="slow")
        with pytest.raises(store.StaleToken):
            store.fail(store.Held(SCOPE, "k8", slow.token), error="slow")
    r = Receipt.objects.get(key="k8")
    assert (r.status, r.response_body) == ("completed", "fast")
    assert outcomes("k8") == ["claimed", "lease_takeover", "completed", "stale_token", "stale_token"]


def test_an_expired_receipt_counts_as_absent():
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = store.claim(SCOPE, "k9", "email.send", {"v": 1})
        store.complete(store.Held(SCOPE, "k9", first.token), body="one")
        traveller.shift(timedelta(hours=24, seconds=1))
        again = store.claim(SCOPE, "k9", "email.send", {"v": 2})  # even a new request
        assert again.outcome == "claimed"
        assert again.token == first.token + 1
        assert again.receipt.attempts == 1


def test_a_permanent_operations_receipt_never_expires_and_its_key_is_never_claimed_again(settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}}
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = store.claim(SCOPE, "welcome:42", "email.welcome", {"user": 42})
        assert first.receipt.expires_at is None and first.receipt.permanent
        store.complete(store.Held(SCOPE, "welcome:42", first.token), body="sent")
        traveller.shift(timedelta(days=3650))
        again = store.claim(SCOPE, "welcome:42", "email.welcome", {"user": 42})
        assert again.outcome == "replayed" and again.receipt.response_body == "sent"
        # Another request under the key is still a reuse of it, never a new life.
        assert store.claim(SCOPE, "welcome:42", "email.welcome", {"user": 43}).outcome == "mismatch"


def test_a_permanent_receipt_that_failed_is_retried_and_stays_permanent(settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}}
    first = store.claim(SCOPE, "welcome:7", "email.welcome", {"user": 7})
    store.fail(store.Held(SCOPE, "welcome:7", first.token), error="smtp down")
    again = store.claim(SCOPE, "welcome:7", "email.welcome", {"user": 7})
    assert again.outcome == "retried_after_failure" and again.receipt.expires_at is None


def test_a_ttl_covering_a_window_keeps_a_windowed_key_for_its_window(settings):
    settings.RECEIPTS_OPERATIONS = {"report.weekly": {"ttl_seconds": 8 * 24 * 3600}}
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = store.claim(SCOPE, "report:2026-W48", "report.weekly", {})
        store.complete(store.Held(SCOPE, "report:2026-W48", first.token), body="sent")
        traveller.shift(timedelta(days=7, hours=23))
        assert store.claim(SCOPE, "report:2026-W48", "report.weekly", {}).outcome == "replayed"


def test_keys_of_different_scopes_never_collide():
    assert store.claim("client:a", "same", "email.send", {}).outcome == "claimed"
    assert store.claim("client:b", "same", "email.send", {}).outcome == "claimed"


def test_release_by_an_operator_makes_a_stuck_key_claimable_and_fences_the_worker():
    stuck = store.claim(SCOPE, "k10", "email.send", {})
    store.release(stuck.receipt, actor="alice", reason="customer retried")
    again = store.claim(SCOPE, "k10", "email.send", {})
    assert again.outcome == "retried_after_failure"
    with pytest.raises(store.StaleToken):
        store.complete(store.Held(SCOPE, "k10", stuck.token), body="late")
    assert outcomes("k10") == ["claimed", "released", "retried_after_failure", "stale_token"]


def test_a_completed_receipt_cannot_be_released():
    r = store.claim(SCOPE, "k11", "email.send", {})
    store.complete(store.Held(SCOPE, "k11", r.token))
    with pytest.raises(store.NotReleasable):
        store.release(Receipt.objects.get(key="k11"), actor="bob")


def test_the_refusals_are_the_cores_under_their_old_names():
    r = store.claim(SCOPE, "k11b", "email.send", {})
    store.complete(store.Held(SCOPE, "k11b", r.token))
    with pytest.raises(leases.NotApplicable):
        store.release(Receipt.objects.get(key="k11b"), actor="bob")
    with pytest.raises(leases.StaleToken):
        store.complete(store.Held(SCOPE, "k11b", r.token), body="another result")
    assert store.StaleToken is leases.StaleToken and issubclass(store.NotReleasable, leases.NotApplicable)


def test_a_plural_financial_noun_gets_the_financial_ttl():
    result = store.claim(SCOPE, "k7b", "payments.capture", {})
    assert result.receipt.expires_at - result.receipt.created_at == timedelta(days=7)


def test_an_operator_release_keeps_the_error_and_marks_the_key_until_the_next_attempt():
    first = store.claim(SCOPE, "k12", "email.send", {})
    store.fail(store.Held(SCOPE, "k12", first.token), error="smtp down")
    released = store.release(Receipt.objects.get(key="k12"), actor="bob", reason="provider back")
    assert (released.status, released.error, released.shown_status) == ("failed", "smtp down", "released")
    assert (released.released_by, released.release_reason) == ("bob", "provider back")
    with pytest.raises(store.NotReleasable):
        store.release(released, actor="bob")  # once is enough: the next attempt will run
    again = store.claim(SCOPE, "k12", "email.send", {})
    assert again.outcome == "retried_after_failure"
    store.fail(store.Held(SCOPE, "k12", again.token), error="smtp down again")
    r = Receipt.objects.get(key="k12")
    assert (r.shown_status, r.released_at, r.released_by, r.error) == ("failed", None, "", "smtp down again")


def test_a_workers_release_records_its_reason_as_the_error_and_marks_the_key():
    first = store.claim(SCOPE, "k13", "email.send", {})
    r = store.release(Receipt.objects.get(key="k13"), token=first.token, reason="HTTP 401: not stored")
    assert (r.error, r.released, r.released_by) == ("HTTP 401: not stored", True, "")


@pytest.mark.parametrize("other", ["ORDER-1", "order-1 ", "Order-1"])
def test_keys_that_differ_only_in_case_or_trailing_space_are_different_keys(other):
    """A key is its exact bytes: a case-insensitive or space-padding collation (MySQL's and
    MariaDB's defaults) must not make one caller's key replay another's."""
    first = store.claim(SCOPE, "order-1", "email.send", {"n": 1})
    assert store.claim(SCOPE, other, "email.send", {"n": 2}).outcome == "claimed"
    assert store.claim(SCOPE, "order-1", "email.send", {"n": 1}).outcome == "in_progress"
    assert first.outcome == "claimed" and Receipt.objects.count() == 2


# --- renew: the heartbeat of a running attempt ---------------------------------------------

def test_a_renewal_keeps_a_running_attempt_from_being_taken_over():
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = store.claim(SCOPE, "r1", "email.send", {}, lease_seconds=30)
        traveller.shift(timedelta(seconds=20))
        expires = store.renew(store.Held(SCOPE, "r1", first.token), lease_seconds=30)
        assert expires == timezone.now() + timedelta(seconds=30)
        traveller.shift(timedelta(seconds=20))  # 40 s after the claim, 20 s after the renewal
        assert store.claim(SCOPE, "r1", "email.send", {}).outcome == "in_progress"
        store.complete(store.Held(SCOPE, "r1", first.token), body="done")
    assert Receipt.objects.get(key="r1").status == "completed"
    # A renewal writes no line in the attempt log.
    assert outcomes("r1") == ["claimed", "in_progress", "completed"]


def test_a_renewal_without_a_length_gives_the_operations_lease(settings):
    settings.RECEIPTS_OPERATIONS = {"report.build": {"lease_seconds": 300}}
    with time_machine.travel(timezone.now(), tick=False):
        first = store.claim(SCOPE, "r2", "report.build", {}, lease_seconds=5)
        expires = store.renew(store.Held(SCOPE, "r2", first.token))
        assert expires == timezone.now() + timedelta(seconds=300)
        assert Receipt.objects.get(key="r2").lease_expires_at == expires


@pytest.mark.parametrize("lost", ["taken over", "released", "completed by the next attempt"])
def test_a_renewal_with_a_token_that_lost_the_receipt_is_refused_and_logged(lost):
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = store.claim(SCOPE, "r3", "email.send", {}, lease_seconds=1)
        if lost == "taken over":
            traveller.shift(timedelta(seconds=2))
            store.claim(SCOPE, "r3", "email.send", {})
        elif lost == "released":
            store.release(Receipt.objects.get(key="r3"), actor="otto")
        else:
            traveller.shift(timedelta(seconds=2))
            second = store.claim(SCOPE, "r3", "email.send", {})
            store.complete(store.Held(SCOPE, "r3", second.token), body="done")
        before = Receipt.objects.get(key="r3").lease_expires_at
        with pytest.raises(store.StaleToken):
            store.renew(store.Held(SCOPE, "r3", first.token), lease_seconds=60)
    assert Receipt.objects.get(key="r3").lease_expires_at == before
    last = Attempt.objects.filter(key="r3").order_by("id").last()
    assert (last.outcome, last.fencing_token) == ("stale_token", first.token)
    assert "heartbeat" in last.detail


@pytest.mark.parametrize("settle", ["complete", "fail"])
def test_a_renewal_after_its_own_attempt_settled_is_refused_without_a_lost_lease_line(settle):
    """A heartbeat that waited behind its attempt's completion (in a queue, or a renewal
    thread's last beat) must stop, but it lost no lease: no stale_token line, which the
    dashboard counts as one."""
    first = store.claim(SCOPE, "r5", "email.send", {})
    if settle == "complete":
        store.complete(store.Held(SCOPE, "r5", first.token), body="done")
    else:
        store.fail(store.Held(SCOPE, "r5", first.token), error="boom")
    with pytest.raises(store.StaleToken):
        store.renew(store.Held(SCOPE, "r5", first.token), lease_seconds=60)
    assert outcomes("r5") == ["claimed", "completed" if settle == "complete" else "failed"]
    # A token the receipt never had is still a stale one.
    with pytest.raises(store.StaleToken):
        store.renew(store.Held(SCOPE, "r5", first.token + 1), lease_seconds=60)
    assert outcomes("r5")[-1] == "stale_token"


@pytest.mark.parametrize("settle", ["complete", "fail"])
def test_a_settlement_sent_again_after_it_landed_is_done_and_logged_once(settle):
    """Its sender lost the answer (a dropped connection, a timeout while it committed) and
    sends it again: the same token with the same result is the same settlement, done, not
    a lost lease (no stale_token line, which the dashboard counts as one). Another result
    under that token is still refused."""
    first = store.claim(SCOPE, "s1", "email.send", {})

    def send(result: str) -> None:
        if settle == "complete":
            store.complete(store.Held(SCOPE, "s1", first.token), response_status=201, content_type="text/plain", body=result)
        else:
            store.fail(store.Held(SCOPE, "s1", first.token), error=result, response_status=503)

    send("done")
    settled = Receipt.objects.get(key="s1")
    send("done")
    assert outcomes("s1") == ["claimed", "completed" if settle == "complete" else "failed"]
    with pytest.raises(store.StaleToken):
        send("DONE")  # differs in case only: compared exactly, whatever the database's collation
    assert outcomes("s1")[-1] == "stale_token"
    again = Receipt.objects.get(key="s1")
    assert (again.response_body, again.error, again.completed_at) == (settled.response_body, settled.error, settled.completed_at)


@pytest.mark.django_db(transaction=True)
def test_a_settlement_sent_again_while_its_first_try_commits_is_done_and_logged_once():
    """The retry's UPDATE waits on the row its first try holds, and finds it settled when that
    commits: the same settlement, not a stale one. (Row locks: PostgreSQL, MySQL/MariaDB;
    SQLite's one writer orders them as the test above does.)"""
    import threading

    from django.db import connection, connections

    if connection.vendor == "sqlite":
        pytest.skip("needs row locks: PostgreSQL or MySQL/MariaDB")
    first = store.claim(SCOPE, "s2", "email.send", {})
    answers: list[object] = []

    def retry() -> None:
        try:
            store.complete(store.Held(SCOPE, "s2", first.token), body="done")
            answers.append("done")
        except Exception as exc:  # noqa: BLE001 - the test reads it
            answers.append(exc)
        finally:
            connections.close_all()

    retrying = threading.Thread(target=retry)
    with uncommitted(lambda: store.complete(store.Held(SCOPE, "s2", first.token), body="done")):
        retrying.start()
        until_transactions_wait_on_locks(1, "the retry's settle waits on its first try's row")
    retrying.join(30)
    assert answers == ["done"]
    assert outcomes("s2") == ["claimed", "completed"]


def test_a_renewal_of_an_unknown_key_is_refused():
    with pytest.raises(store.StaleToken):
        store.renew(store.Held(SCOPE, "nobody", 1))


# --- after_crash "hold": outcome unknown instead of a blind re-run ----------------------------

ASKED: list[store.Unsettled] = []


def reconcile_raises(unsettled: store.Unsettled):
    ASKED.append(unsettled)
    raise ConnectionError("provider unreachable")


def reconcile_unstorable(unsettled: store.Unsettled):
    return {"at": object()}


def reconcile_found(unsettled: store.Unsettled):
    ASKED.append(unsettled)
    return {"sent_as": unsettled.downstream_key}


def _held(settings, reconcile: str | None = None) -> None:
    rule = {"after_crash": "hold", **({"reconcile": f"{__name__}.{reconcile}"} if reconcile else {})}
    settings.RECEIPTS_OPERATIONS = {"email.send": rule}


def _lapse(key: str) -> None:
    Receipt.objects.filter(key=key).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


def test_under_hold_a_lapsed_attempt_is_answered_outcome_unknown_and_nobody_takes_it_over(settings):
    _held(settings)
    first = store.claim(SCOPE, "h1", "email.send", {})
    assert store.claim(SCOPE, "h1", "email.send", {}).outcome == "in_progress"  # its lease runs
    _lapse("h1")
    held = store.claim(SCOPE, "h1", "email.send", {}, wait_seconds=0.2)
    assert held.outcome == "outcome_unknown" and not held.owned and held.token is None
    r = Receipt.objects.get(key="h1")
    assert (r.status, r.fencing_token, r.attempts, r.shown_status) == ("processing", first.token, 1, "outcome-unknown")
    assert outcomes("h1") == ["claimed", "in_progress", "outcome_unknown"]


def test_the_default_after_crash_still_takes_a_lapsed_lease_over():
    store.claim(SCOPE, "h2", "email.send", {})
    _lapse("h2")
    assert store.claim(SCOPE, "h2", "email.send", {}).outcome == "lease_takeover"
    assert not Receipt.objects.get(key="h2").outcome_unknown


def test_a_reconcile_that_raises_leaves_the_receipt_outcome_unknown_never_completed(settings):
    _held(settings, "reconcile_raises")
    ASKED.clear()
    claimed = store.claim(SCOPE, "h3", "email.send", {"to": "a"})
    _lapse("h3")
    assert store.claim(SCOPE, "h3", "email.send", {"to": "a"}).outcome == "outcome_unknown"
    r = Receipt.objects.get(key="h3")
    assert r.status == "processing" and r.fencing_token == claimed.token and r.outcome_unknown
    assert Attempt.objects.filter(key="h3", outcome="outcome_unknown").get().detail == (
        "reconcile raised ConnectionError: provider unreachable"
    )
    assert [(u.key, u.operation, u.request, u.attempts) for u in ASKED] == [("h3", "email.send", {"to": "a"}, 1)]


def test_a_reconcile_result_that_cannot_be_stored_leaves_the_receipt_outcome_unknown(settings):
    _held(settings, "reconcile_unstorable")
    store.claim(SCOPE, "h4", "email.send", {})
    _lapse("h4")
    assert store.claim(SCOPE, "h4", "email.send", {}).outcome == "outcome_unknown"
    assert "cannot be stored as JSON" in Attempt.objects.get(key="h4", outcome="outcome_unknown").detail
    assert Receipt.objects.get(key="h4").status == "processing"


def test_reconcile_is_asked_by_the_downstream_key_and_its_result_is_replayed(settings):
    from receipts.downstream import downstream_key

    _held(settings, "reconcile_found")
    ASKED.clear()
    store.claim(SCOPE, "h5", "email.send", {})
    _lapse("h5")
    replay = store.claim(SCOPE, "h5", "email.send", {})
    r = Receipt.objects.get(key="h5")
    sent_as = downstream_key(SCOPE, "h5", r.created_at)
    assert ASKED[0].downstream_key == sent_as
    assert replay.outcome == "replayed" and r.status == "completed"
    assert (r.response_status, r.response_content_type, r.response_body) == (200, "application/json", f'{{"sent_as":"{sent_as}"}}')
    assert outcomes("h5") == ["claimed", "completed", "replayed"]
    assert Attempt.objects.get(key="h5", outcome="completed").detail == "reconciled: the provider has the effect"


def test_the_lapsed_attempt_that_settles_late_resolves_it(settings):
    _held(settings)
    first = store.claim(SCOPE, "h6", "email.send", {})
    _lapse("h6")
    assert store.claim(SCOPE, "h6", "email.send", {}).outcome == "outcome_unknown"
    store.complete(store.Held(SCOPE, "h6", first.token), body="late but done")
    assert store.claim(SCOPE, "h6", "email.send", {}).outcome == "replayed"


def test_an_operator_repair_of_a_receipt_that_is_not_held_is_refused(settings):
    _held(settings)
    store.claim(SCOPE, "h7", "email.send", {})  # its lease still runs: not held
    r = Receipt.objects.get(key="h7")
    with pytest.raises(store.NotHeld):
        store.mark_completed(r, result="{}", actor="otto")
    with pytest.raises(store.NotHeld):
        store.run_again(r, actor="otto")
    with pytest.raises(store.InvalidResult):
        store.mark_completed(r, result="not json", actor="otto")


# --- MySQL/MariaDB: claims racing a purge of their key ---------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_claims_racing_a_purge_of_their_key_are_decided_right_on_mysql():
    """A purge deletes an expired receipt and, before it commits, three callers claim its
    key: their inserts wait on the deleted row's key. When the purge commits, MySQL 8 lets one
    insert and may roll the others back as a deadlock's victims (ER_LOCK_DEADLOCK: each
    victim's decision runs again, `retry_deadlocks`, itself proven with a real deadlock in
    tests/core/test_mysql.py); MariaDB 10.11 (here) lets the others wait on the first insert
    and answers them a duplicate key (its Innodb_deadlocks stays 0). Either way: one claim,
    the others in progress, no error."""
    import threading

    from django.db import connection, connections

    if connection.vendor != "mysql":
        pytest.skip("needs MySQL/MariaDB: set DATABASE_URL=mysql://...")
    first = store.claim(SCOPE, "dl", "email.send", {"to": "a"})
    store.complete(store.Held(SCOPE, "dl", first.token), body="old")
    Receipt.objects.filter(key="dl").update(expires_at=timezone.now() - timedelta(seconds=1))
    answers: list[object] = []

    def claim() -> None:
        try:
            answers.append(store.claim(SCOPE, "dl", "email.send", {"to": "a"}).outcome)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            answers.append(exc)
        finally:
            connections.close_all()

    claims = [threading.Thread(target=claim) for _ in range(3)]
    with uncommitted(lambda: Receipt.objects.filter(key="dl").delete()):  # the purge, not committed yet
        for thread in claims:
            thread.start()
        until_transactions_wait_on_locks(3, "the three claims' inserts wait on the deleted row's key")
    for thread in claims:
        thread.join(30)

    assert sorted(map(str, answers)) == ["claimed", "in_progress", "in_progress"], answers
    assert Receipt.objects.get(scope=SCOPE, key="dl").status == "processing"


# --- how long a claim took (Attempt.claim_ms) -------------------------------------------------


def test_every_claim_outcome_logs_how_long_it_took_and_no_settle_does():
    first = store.claim(SCOPE, "timed", "email.send", {"n": 1})
    assert store.claim(SCOPE, "timed", "email.send", {"n": 1}).outcome == "in_progress"
    assert store.claim(SCOPE, "timed", "email.send", {"n": 2}).outcome == "mismatch"
    store.complete(store.Held(SCOPE, "timed", first.token), body="{}")
    assert store.claim(SCOPE, "timed", "email.send", {"n": 1}).outcome == "replayed"
    logged = list(Attempt.objects.filter(key="timed").order_by("id").values_list("outcome", "claim_ms"))
    assert [outcome for outcome, _ in logged] == ["claimed", "in_progress", "mismatch", "completed", "replayed"]
    for outcome, ms in logged:
        if outcome == "completed":
            assert ms is None
        else:
            assert ms > 0, (outcome, ms)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_claims_duration_counts_its_wait_on_a_lock():
    """The key's row is held by another transaction (inserted, deleted, not committed yet) for
    0.3 s: the claim's insert waits on it, and that wait is the claim's. On PostgreSQL the
    claim's own statement logs it (the server's clock, receipts/pg.py); elsewhere the store."""
    import threading
    import time

    from django.db import connection, connections

    if connection.vendor == "sqlite":
        pytest.skip("SQLite takes one writer at a time: no row lock to wait on")
    answers: list[object] = []

    def claim() -> None:
        try:
            answers.append(store.claim(SCOPE, "locked", "email.send", {"n": 1}).outcome)
        finally:
            connections.close_all()

    def insert_and_delete() -> None:
        Receipt.objects.filter(pk=store.claim(SCOPE, "locked", "email.send", {"n": 0}).receipt.pk).delete()
        Attempt.objects.filter(key="locked").delete()

    waiting = threading.Thread(target=claim)
    with uncommitted(insert_and_delete):
        waiting.start()
        until_transactions_wait_on_locks(1, "the claim's insert waits on the held row")
        time.sleep(0.3)
    waiting.join(30)
    assert answers == ["claimed"]
    assert Attempt.objects.get(key="locked").claim_ms >= 300


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_waits_for_the_running_first_attempt_does_not_count_that_wait(monkeypatch):
    """`waited_ms` is the first attempt's time; `claim_ms` is the claim's own work."""
    import threading

    from django.db import connection, connections

    from tests.clock import HeldWaiterTimer

    timer = HeldWaiterTimer(monkeypatch, reach=1.0)  # a second of waiting, on the store's held clock
    first = store.claim(SCOPE, "awaited", "email.send", {"n": 1})
    answers: list[store.ClaimResult] = []

    def duplicate() -> None:
        try:
            connection.ensure_connection()  # opening the thread's connection is not the claim's
            answers.append(store.claim(SCOPE, "awaited", "email.send", {"n": 1}, wait_seconds=10))
        finally:
            connections.close_all()

    waiter = threading.Thread(target=duplicate)
    waiter.start()
    assert timer.reached.wait(30), "the duplicate never waited a second"
    store.complete(store.Held(SCOPE, "awaited", first.token), body="{}")
    waiter.join(30)
    assert answers[0].outcome == "replayed" and answers[0].waited_ms >= 1000
    line = Attempt.objects.get(key="awaited", outcome="waited")
    assert line.waited_ms >= 1000 and line.claim_ms < line.waited_ms / 2
