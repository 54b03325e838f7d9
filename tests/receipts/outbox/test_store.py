from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
import time_machine
from django.db import transaction
from django.utils import timezone

from idemdash.core.models import AuditEntry
from receipts.outbox import store
from receipts.outbox.actions import UnknownAction
from receipts.outbox.models import OutboxAttempt, OutboxMessage

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/hook"


def post(key: str, n: int = 1) -> OutboxMessage:
    return store.enqueue("http.post", {"url": URL, "json": {"n": n}}, key).message


def claim_one(drainer: str = "d1") -> OutboxMessage:
    (message,) = store.claim_batch(drainer, batch_size=1)
    return message


def test_enqueue_adds_a_pending_message_due_now():
    result = store.enqueue("http.post", {"url": URL, "json": {"n": 1}}, "k1")
    assert result.created
    m = OutboxMessage.objects.get(key="k1")
    assert (m.status, m.attempts, m.scope) == ("pending", 0, "")
    assert m.next_attempt_at <= timezone.now()


def test_enqueue_repeated_with_the_same_key_returns_the_first_message():
    first = store.enqueue("http.post", {"url": URL, "json": {"a": 1, "b": 2}}, "k2")
    again = store.enqueue("http.post", {"json": {"b": 2, "a": 1}, "url": URL}, "k2")
    assert not again.created and again.message.pk == first.message.pk
    assert OutboxMessage.objects.count() == 1


def test_the_same_key_for_another_message_is_refused():
    post("k3", n=1)
    with pytest.raises(store.KeyReused):
        post("k3", n=2)


def test_a_duplicate_key_does_not_spoil_the_callers_transaction():
    post("k4")
    with transaction.atomic():
        post("k4")  # a savepoint absorbs the IntegrityError
        post("k5")
    assert set(OutboxMessage.objects.values_list("key", flat=True)) == {"k4", "k5"}


def test_enqueue_rolls_back_with_the_callers_transaction():
    with pytest.raises(RuntimeError), transaction.atomic():
        post("k6")
        raise RuntimeError("the caller's own write failed")
    assert not OutboxMessage.objects.exists()


def queued_sends() -> list[tuple]:
    from django_q.models import OrmQ

    return [(task.func(), task.args()) for task in OrmQ.objects.all()]


def test_a_new_message_is_handed_to_the_worker_once_its_transaction_commits(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with transaction.atomic():
            message = post("k7")
            assert queued_sends() == []  # not before the commit: the worker could not see it
        post("k7")  # a repeat adds nothing
    assert len(callbacks) == 1
    assert queued_sends() == [(store.SEND_TASK, (message.pk,))]


def test_a_message_rolled_back_is_never_handed_to_the_worker(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            post("k8")
            raise RuntimeError("the caller's own write failed")
    assert callbacks == [] and queued_sends() == []


def test_scopes_keep_keys_apart():
    store.enqueue("http.post", {"url": URL}, "same", scope="client:a")
    assert store.enqueue("http.post", {"url": URL}, "same", scope="client:b").created


@pytest.mark.parametrize(
    "action,payload,error",
    [
        ("no.such.action", {}, UnknownAction),
        ("http.post", {"url": "ftp://example.com/"}, ValueError),
        ("http.post", ["not", "an", "object"], ValueError),
        ("email.send", {"to": "a@example.com", "subject": "hi"}, ValueError),
    ],
)
def test_a_message_its_action_cannot_perform_is_refused_before_writing(action, payload, error):
    with pytest.raises(error):
        store.enqueue(action, payload, "k7")
    assert not OutboxMessage.objects.exists()


def test_a_claim_puts_the_message_in_flight_with_a_lease_and_a_new_token():
    post("k8")
    m = claim_one()
    assert (m.status, m.attempts, m.fencing_token, m.claimed_by) == ("in_flight", 1, 1, "d1")
    assert m.lease_expires_at > timezone.now()
    assert store.claim_batch("d2") == []  # nothing else is due


def test_messages_waiting_for_their_backoff_are_not_claimed():
    post("k9")
    OutboxMessage.objects.update(status="retry", next_attempt_at=timezone.now() + timedelta(minutes=5))
    assert store.claim_batch("d1") == []


def test_a_drainer_whose_lease_ran_out_cannot_settle_the_message_it_lost():
    post("k10")
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        slow = claim_one("slow")
        traveller.shift(timedelta(seconds=61))
        fast = claim_one("fast")
        assert fast.fencing_token == slow.fencing_token + 1 and fast.attempts == 2
        store.mark_sent(fast, status_code=200, drainer="fast")
        with pytest.raises(store.StaleClaim):
            store.mark_failed(slow, "HTTP 503", drainer="slow")
        assert not store.renew_lease(slow)
    m = OutboxMessage.objects.get(key="k10")
    assert m.status == "sent"
    outcomes = list(OutboxAttempt.objects.order_by("id").values_list("drainer", "outcome"))
    assert outcomes == [("fast", "sent"), ("slow", "stale")]


def test_a_retry_waits_an_exponential_jittered_delay_up_to_the_cap(settings):
    settings.OUTBOX_BACKOFF_BASE_SECONDS = 10
    settings.OUTBOX_BACKOFF_CAP_SECONDS = 1000
    settings.OUTBOX_MAX_ATTEMPTS = 40
    post("k11")
    delays = []
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for attempt in range(1, 5):
            m = claim_one()
            assert m.attempts == attempt
            assert store.mark_failed(m, "HTTP 503") == "retry"
            m.refresh_from_db()
            delays.append((m.next_attempt_at - timezone.now()).total_seconds())
            traveller.move_to(m.next_attempt_at)
    for attempt, delay in enumerate(delays, start=1):
        step = 10 * 2 ** (attempt - 1)
        assert step / 2 <= delay <= step
    with time_machine.travel(timezone.now(), tick=False):
        OutboxMessage.objects.filter(key="k11").update(attempts=29, next_attempt_at=timezone.now())
        m = claim_one()
        assert store.mark_failed(m, "HTTP 503") == "retry"
        m.refresh_from_db()
        assert 500 <= (m.next_attempt_at - timezone.now()).total_seconds() <= 1000  # the cap


def test_a_retry_honours_retry_after(settings):
    settings.OUTBOX_BACKOFF_BASE_SECONDS = 1
    post("k12")
    m = claim_one()
    store.mark_failed(m, "HTTP 429", retry_after=120, status_code=429)
    m.refresh_from_db()
    assert (m.status, m.last_status_code) == ("retry", 429)
    assert (m.next_attempt_at - timezone.now()).total_seconds() > 119


def test_a_permanent_error_is_dead_at_once():
    post("k13")
    m = claim_one()
    assert store.mark_failed(m, "HTTP 404", permanent=True, status_code=404) == "dead"
    m.refresh_from_db()
    assert (m.status, m.attempts, m.last_error) == ("dead", 1, "HTTP 404")


def test_the_last_allowed_attempt_is_dead(settings):
    settings.OUTBOX_MAX_ATTEMPTS = 2
    post("k14")
    store.mark_failed(claim_one(), "HTTP 503")
    OutboxMessage.objects.update(next_attempt_at=timezone.now())
    assert store.mark_failed(claim_one(), "HTTP 503") == "dead"


def test_a_message_whose_drainers_keep_dying_dies_at_the_attempt_limit(settings):
    settings.OUTBOX_MAX_ATTEMPTS = 1
    post("k15")
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        claim_one()
        traveller.shift(timedelta(seconds=61))
        assert store.claim_batch("d2") == []
    assert OutboxMessage.objects.get(key="k15").status == "dead"
    logged = OutboxAttempt.objects.get(key="k15")
    assert (logged.outcome, logged.number, logged.drainer) == ("dead", 1, "d1")


def test_send_again_gives_fresh_attempts_and_is_audited(admin_user):
    post("k16")
    store.mark_failed(claim_one(), "HTTP 404", permanent=True)
    m = OutboxMessage.objects.get(key="k16")
    store.send_again(m, actor="admin", user=admin_user, reason="endpoint fixed")
    m.refresh_from_db()
    assert (m.status, m.attempts) == ("pending", 0)
    assert claim_one().key == "k16"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after, entry.user) == (
        "outbox_message.send_again",
        "dead",
        "pending",
        admin_user,
    )
    assert entry.detail == "endpoint fixed" and entry.object_id == str(m.pk)


def test_send_again_applies_only_to_dead_messages():
    m = post("k17")
    with pytest.raises(store.InvalidTransition):
        store.send_again(m, actor="bob")
    assert not AuditEntry.objects.exists()


def test_send_now_makes_a_waiting_message_due_and_is_audited():
    post("k18")
    store.mark_failed(claim_one(), "HTTP 503")
    OutboxMessage.objects.update(next_attempt_at=timezone.now() + timedelta(hours=1))
    m = OutboxMessage.objects.get(key="k18")
    store.send_now(m, actor="alice")
    assert claim_one().key == "k18"
    assert AuditEntry.objects.get().action == "outbox_message.send_now"


def test_send_now_is_refused_for_a_message_in_flight():
    post("k19")
    m = claim_one()
    with pytest.raises(store.InvalidTransition):
        store.send_now(m, actor="alice")


def test_a_repair_loses_to_a_drainer_that_claimed_the_message_meanwhile():
    m = post("k20")
    claim_one()  # m is now stale: pending in our hands, in flight in the database
    with pytest.raises(store.InvalidTransition):
        store.send_now(m, actor="alice")


def test_a_handed_back_message_is_due_again_and_its_claim_does_not_count():
    post("k21")
    m = claim_one()
    assert store.hand_back(m)
    again = claim_one()
    assert again.attempts == 1 and again.fencing_token == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_from_threads_take_disjoint_batches():
    import threading

    from django.db import connections

    for n in range(60):
        post(f"t-{n}", n)
    claimed: dict[str, list[str]] = {}
    start = threading.Barrier(6)

    def drainer(name: str) -> None:
        try:
            start.wait(10)
            mine: list[str] = []
            while batch := store.claim_batch(name, batch_size=4):
                mine += [m.key for m in batch]
            claimed[name] = mine
        finally:
            connections.close_all()

    threads = [threading.Thread(target=drainer, args=(f"d{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    keys = [key for mine in claimed.values() for key in mine]
    assert len(claimed) == 6
    assert sorted(keys) == sorted(f"t-{n}" for n in range(60))  # each exactly once
    assert set(OutboxMessage.objects.values_list("fencing_token", flat=True)) == {1}


# --- failures grouped by cause (idemdash/core/failures.py) -------------------------------------


def test_each_failed_send_counts_in_its_destinations_group_and_a_sent_message_leaves_it():
    from idemdash.core.failures import FailureGroup

    for key in ("a", "b"):
        post(key)
        store.mark_failed(claim_one(), f"HTTP 403: forbidden for {key}-order-8200000000001", permanent=True, status_code=403)
    post("c")
    retried = claim_one()
    store.mark_failed(retried, "HTTP 403: forbidden for c-order-8200000000002", status_code=403)
    group = FailureGroup.objects.get()
    assert (group.kind, group.place, group.failures) == ("message", f"http.post {urlsplit(URL).hostname}", 3)
    assert group.cause == "HTTP 403: forbidden for <id>"
    assert set(OutboxMessage.objects.values_list("failure_signature", flat=True)) == {group.signature}

    OutboxMessage.objects.filter(pk=retried.pk).update(next_attempt_at=timezone.now())
    store.mark_sent(claim_one(), status_code=200)
    assert OutboxMessage.objects.get(pk=retried.pk).failure_signature == ""
