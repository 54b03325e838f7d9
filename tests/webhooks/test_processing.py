from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone
from django_q.models import OrmQ

from idemdash.core.models import AuditEntry
from receipts.outbox import store as outbox
from receipts.outbox.models import OutboxMessage
from receipts.references import cause_of, caused_by, objects_referring
from tests.webhooks.conftest import make_endpoint, queued_event_ids
from webhooks import processing
from idemdash.devtools.models import Fulfilment
from webhooks.models import WebhookAttempt, WebhookEvent
from webhooks.receive import store_delivery
from webhooks.verify import VerifiedDelivery

pytestmark = pytest.mark.django_db


def make_event(event_type: str = "thing.happened", *, slug: str = "ep", payload: dict | None = None) -> WebhookEvent:
    endpoint = make_endpoint(slug, "stripe", "whsec_processing_tests_0000")
    key = f"evt_{WebhookEvent.objects.count() + 1}"
    payload = payload or {"id": key, "type": event_type}
    verified = VerifiedDelivery(0, payload, key, event_type, key, "")
    return store_delivery(endpoint, verified).event


def boom(event: WebhookEvent) -> None:
    raise RuntimeError("downstream is down")


def run_queued_tasks() -> list[str]:
    """What a django-q2 worker does with each queued package: verify, unpickle, call."""
    import pydoc

    from django_q.signing import SignedPackage

    outcomes = []
    for queued in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(queued.payload)
        outcomes.append(pydoc.locate(task["func"])(*task["args"], **task["kwargs"]))
    return outcomes


def test_the_task_a_delivery_writes_runs_its_event_once():
    event = make_event()
    assert run_queued_tasks() == ["ignored"]
    assert WebhookEvent.objects.get(pk=event.pk).status == "ignored"
    assert run_queued_tasks() == ["not_claimed"]  # a second run of the same task finds it done


def test_a_claim_is_one_statement_that_returns_the_claimed_event_as_stored(django_assert_num_queries):
    event = make_event(payload={"id": "evt_1", "data": {"object": {"amount": 5}}})
    # MySQL has no UPDATE ... RETURNING: there the claim is the UPDATE, then the read.
    with django_assert_num_queries(2 if connection.vendor == "mysql" else 1):
        claimed = processing.claim_event(event.pk)
    stored = WebhookEvent.objects.get(pk=event.pk)
    assert claimed.payload == stored.payload == {"id": "evt_1", "data": {"object": {"amount": 5}}}
    assert (claimed.fencing_token, claimed.lease_expires_at, claimed.attempts) == (
        stored.fencing_token, stored.lease_expires_at, 1
    )
    assert claimed.received_at == stored.received_at and claimed.status == "processing"


def test_processing_by_key_claims_only_the_event_of_that_endpoint_and_key():
    event = make_event()
    other = make_endpoint("other", "stripe")
    assert processing.process_event_by_key(other.pk, event.dedupe_key) == "not_claimed"
    assert processing.process_event_by_key(event.endpoint_id, "evt_unknown") == "not_claimed"
    assert processing.process_event_by_key(event.endpoint_id, event.dedupe_key) == "ignored"
    assert WebhookEvent.objects.get(pk=event.pk).attempts == 1


def test_a_claim_admits_one_worker_and_starts_a_lease():
    event = make_event()
    first = processing.claim_event(event.pk)
    assert first is not None and first.status == "processing" and first.attempts == 1
    assert first.lease_expires_at > timezone.now()
    assert processing.claim_event(event.pk) is None


def test_a_handled_event_is_completed(registry):
    seen = []
    registry("stripe", "thing.happened", seen.append)
    event = make_event()
    assert processing.process_event(event.pk) == "completed"
    event.refresh_from_db()
    assert event.status == "completed" and event.finished_at and event.fencing_token is None
    assert [e.pk for e in seen] == [event.pk]
    assert processing.process_event(event.pk) == "not_claimed"
    assert len(seen) == 1


def test_an_event_without_handler_is_ignored():
    event = make_event("nobody.listens")
    assert processing.process_event(event.pk) == "ignored"
    assert WebhookEvent.objects.get(pk=event.pk).status == "ignored"


def test_a_failure_is_retried_with_exponential_backoff_and_jitter(registry, settings):
    settings.WEBHOOKS_BACKOFF_BASE = 30
    settings.WEBHOOKS_BACKOFF_CAP = 200
    registry("stripe", "thing.happened", boom)
    event = make_event()
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for attempt, ceiling in [(1, 30), (2, 60), (3, 120), (4, 200), (5, 200)]:
            assert processing.process_event(event.pk) == "retry"
            event.refresh_from_db()
            delay = (event.next_attempt_at - timezone.now()).total_seconds()
            assert event.attempts == attempt
            assert ceiling / 2 <= delay <= ceiling
            assert "downstream is down" in event.last_error
            # not due before its time ...
            assert processing.process_event(event.pk) == "not_claimed"
            traveller.shift(timedelta(seconds=delay - 1))
            assert processing.process_event(event.pk) == "not_claimed"
            # ... and due at it
            traveller.shift(timedelta(seconds=1))


def test_an_event_out_of_attempts_is_dead_and_keeps_its_traceback(registry, settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 3
    registry("stripe", "thing.happened", boom)
    event = make_event()
    outcomes = []
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for _ in range(3):
            outcomes.append(processing.process_event(event.pk))
            traveller.shift(timedelta(hours=7))
    assert outcomes == ["retry", "retry", "dead"]
    event.refresh_from_db()
    assert event.status == "dead" and event.attempts == 3
    assert "Traceback" in event.last_error and "RuntimeError: downstream is down" in event.last_error


def test_a_worker_whose_lease_was_taken_over_cannot_settle_the_event():
    event = make_event()
    slow = processing.claim_event(event.pk)
    later = timezone.now() + timedelta(seconds=3600)
    assert processing.sweep(later).stuck_recovered == 1
    fast = processing.claim_event(event.pk, now=later)
    assert fast is not None and fast.fencing_token != slow.fencing_token
    assert processing.complete_event(slow) is False
    assert processing.fail_event(slow, "late") is None
    assert processing.complete_event(fast) is True
    assert WebhookEvent.objects.get(pk=event.pk).status == "completed"


def test_a_handler_whose_completion_is_refused_leaves_no_writes(registry):
    def fulfil_then_lose_the_lease(event: WebhookEvent) -> None:
        Fulfilment.objects.create(payment_id="pi_lost", source_event=event)
        # What a sweeper and another worker would have done meanwhile:
        WebhookEvent.objects.filter(pk=event.pk).update(fencing_token=None)

    registry("stripe", "thing.happened", fulfil_then_lose_the_lease)
    event = make_event()
    assert processing.process_event(event.pk) == "lease_lost"
    assert not Fulfilment.objects.exists()


def test_the_sweeper_returns_a_stuck_event_to_retry_and_enqueues_it():
    event = make_event()
    processing.claim_event(event.pk)
    OrmQ.objects.all().delete()
    assert processing.sweep().stuck_recovered == 0  # the lease is still running
    later = timezone.now() + timedelta(seconds=3600)
    result = processing.sweep(later)
    assert result.stuck_recovered == 1 and result.enqueued == 1
    event.refresh_from_db()
    assert event.status == "retry" and event.stuck_recoveries == 1
    assert "lease expired" in event.last_error
    assert queued_event_ids() == [event.pk]


def test_a_stuck_event_out_of_attempts_is_dead(settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    event = make_event()
    processing.claim_event(event.pk)
    assert processing.sweep(timezone.now() + timedelta(hours=1)).stuck_dead == 1
    assert WebhookEvent.objects.get(pk=event.pk).status == "dead"


def test_the_sweeper_enqueues_a_due_event_whose_enqueue_was_lost():
    event = make_event()
    OrmQ.objects.all().delete()  # the broker lost it
    assert processing.sweep().enqueued == 0  # recently enqueued: give the worker time
    much_later = timezone.now() + timedelta(minutes=10)
    assert processing.sweep(much_later).enqueued == 1
    assert queued_event_ids() == [event.pk]
    assert processing.sweep(much_later + timedelta(seconds=1)).enqueued == 0  # not twice


def test_the_sweeper_enqueues_again_soon_an_event_whose_task_was_lost_while_no_task_waits():
    event, other = make_event(slug="a"), make_event(slug="b")
    OrmQ.objects.all().delete()  # pulled by a cluster that died before running them
    queued_for_other = make_event(slug="c")  # a task waits in the broker: events wait their turn
    soon = timezone.now() + timedelta(seconds=16)
    assert processing.sweep(soon).enqueued == 0
    OrmQ.objects.all().delete()  # nothing waits: the unclaimed events lost their tasks
    assert processing.sweep(soon).enqueued == 3
    assert sorted(queued_event_ids()) == sorted([event.pk, other.pk, queued_for_other.pk])


def test_a_failed_enqueue_is_one_line_and_leaves_the_event_to_the_next_sweep(monkeypatch, caplog):
    import django_q.tasks

    event = make_event()
    OrmQ.objects.all().delete()

    def broker_down(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379.\nConnection refused.")

    monkeypatch.setattr(django_q.tasks, "async_task", broker_down)
    WebhookEvent.objects.filter(pk=event.pk).update(enqueued_at=None)
    with caplog.at_level("WARNING", logger="webhooks.processing"):
        assert processing.sweep().enqueued == 0
    (record,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert record.exc_info is None and "\n" not in record.getMessage()
    assert f"could not enqueue webhook event {event.pk} (ConnectionError: Error 111" in record.getMessage()
    assert WebhookEvent.objects.get(pk=event.pk).enqueued_at is None  # not taken for enqueued

    monkeypatch.undo()  # the broker is back: the next sweep, seconds later, enqueues it
    assert processing.sweep().enqueued == 1
    assert queued_event_ids() == [event.pk]


@pytest.mark.django_db(transaction=True)
def test_a_database_error_of_the_handler_on_a_live_connection_is_retried_after_the_backoff(registry):
    # Only a lost connection gives the event back due now (tests/faults/test_recovery_bounds.py
    # terminates the worker's backends); the handler's own failing query is its failure.
    from django.db import OperationalError

    def lock_timeout(event):
        raise OperationalError("canceling statement due to lock timeout")

    registry("stripe", "thing.happened", lock_timeout)
    event = make_event()
    assert processing.process_event(event.pk) == "retry"
    event.refresh_from_db()
    assert event.next_attempt_at > timezone.now() + timedelta(seconds=5)


def test_the_sweeper_enqueues_a_retry_when_it_is_due(registry):
    registry("stripe", "thing.happened", boom)
    event = make_event()
    processing.process_event(event.pk)
    OrmQ.objects.all().delete()
    assert processing.sweep().enqueued == 0
    event.refresh_from_db()
    assert processing.sweep(event.next_attempt_at).enqueued == 1
    assert queued_event_ids() == [event.pk]


def test_reprocessing_by_hand_runs_a_finished_event_again_and_is_audited(registry):
    seen = []
    registry("stripe", "thing.happened", seen.append)
    event = make_event()
    processing.process_event(event.pk)
    event.refresh_from_db()
    user = get_user_model().objects.create_user("operator")
    OrmQ.objects.all().delete()  # the task the delivery queued
    again = processing.reprocess(event, actor="operator", user=user, reason="handler fixed")
    assert again.status == "received" and again.attempts == 0
    assert queued_event_ids() == [event.pk]  # queued in the reprocess's own transaction
    assert processing.process_event(event.pk) == "completed"
    assert len(seen) == 2
    entry = AuditEntry.objects.get(action="webhook_event.reprocess")
    assert (entry.actor, entry.user, entry.status_before, entry.status_after) == ("operator", user, "completed", "received")
    assert entry.object_id == str(event.pk) and entry.detail == "handler fixed"


def test_an_event_being_processed_cannot_be_reprocessed():
    event = make_event()
    claimed = processing.claim_event(event.pk)
    with pytest.raises(processing.NotReprocessable):
        processing.reprocess(claimed, actor="operator")


def test_reprocessing_a_stale_copy_is_refused():
    event = make_event()
    stale = WebhookEvent.objects.get(pk=event.pk)
    processing.process_event(event.pk)  # ignored meanwhile
    stale.status = "dead"
    with pytest.raises(processing.NotReprocessable):
        processing.reprocess(stale, actor="operator")
    assert not AuditEntry.objects.exists()


def test_the_sweeper_releases_events_held_by_an_endpoint_that_is_no_longer_paused():
    event = make_event()
    WebhookEvent.objects.filter(pk=event.pk).update(status="held", enqueued_at=None)
    assert processing.sweep().released_held == 1
    assert WebhookEvent.objects.get(pk=event.pk).status == "received"


def test_a_claim_without_returning_support_takes_two_statements_and_the_same_event(monkeypatch):
    """SQLite before 3.35 (which Django 5.2 still supports) has no UPDATE ... RETURNING."""
    from django.db import connection

    event = make_event()
    monkeypatch.setattr(connection.features, "can_return_columns_from_insert", False)
    claimed = processing.claim_event(event.pk)
    assert claimed.pk == event.pk and claimed.status == "processing" and claimed.attempts == 1
    assert processing.claim_event(event.pk) is None


# --- the attempt log ----------------------------------------------------------------------------


def test_every_attempt_keeps_its_own_row_with_outcome_error_and_timing(registry, settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 3
    calls = []

    def flaky(event: WebhookEvent) -> None:
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError(f"failure number {len(calls)}")

    registry("stripe", "thing.happened", flaky)
    event = make_event()
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        for _ in range(3):
            processing.process_event(event.pk)
            traveller.shift(timedelta(hours=7))
    rows = list(WebhookAttempt.objects.filter(event=event).order_by("id"))
    assert [(a.number, a.outcome) for a in rows] == [(1, "retry"), (2, "retry"), (3, "completed")]
    assert "RuntimeError: failure number 1" in rows[0].error and "failure number 2" in rows[1].error
    assert rows[2].error == ""
    for a in rows:
        assert a.started_at <= a.finished_at and a.duration_ms == 0  # time stood still


def test_the_last_attempt_of_a_dead_event_is_logged_as_dead(registry, settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    registry("stripe", "thing.happened", boom)
    event = make_event()
    assert processing.process_event(event.pk) == "dead"
    (attempt,) = WebhookAttempt.objects.filter(event=event)
    assert (attempt.number, attempt.outcome) == (1, "dead") and "downstream is down" in attempt.error


def test_the_attempt_row_is_written_with_the_settling_update_and_no_savepoint(django_assert_num_queries):
    event = make_event()
    claimed = processing.claim_event(event.pk)
    # The conditional UPDATE and the attempt's INSERT; on MySQL/MariaDB the UPDATE is three
    # reads and an UPDATE by primary key (idemdash/core/leases.py:_compare_and_set_locked).
    with django_assert_num_queries(5 if connection.vendor == "mysql" else 2) as captured:
        with transaction.atomic(savepoint=False):  # as the handler's transaction, under the test's
            assert processing.complete_event(claimed, "ignored")
    assert not any("SAVEPOINT" in q["sql"] for q in captured.captured_queries)
    assert WebhookAttempt.objects.get(event=event).outcome == "ignored"


def test_a_refused_settlement_writes_no_attempt_of_that_outcome():
    event = make_event()
    slow = processing.claim_event(event.pk)
    WebhookEvent.objects.filter(pk=event.pk).update(fencing_token=None)  # taken over meanwhile
    assert processing.complete_event(slow) is False
    assert not WebhookAttempt.objects.exists()


def test_a_lost_lease_is_logged_as_such(registry):
    def lose_the_lease(event: WebhookEvent) -> None:
        WebhookEvent.objects.filter(pk=event.pk).update(fencing_token=None)

    registry("stripe", "thing.happened", lose_the_lease)
    event = make_event()
    assert processing.process_event(event.pk) == "lease_lost"
    assert list(WebhookAttempt.objects.values_list("number", "outcome")) == [(1, "lease_lost")]


def test_receiving_a_delivery_writes_no_attempt():
    make_event()
    assert not WebhookAttempt.objects.exists()


def test_an_operator_release_logs_the_stuck_attempt():
    event = make_event()
    with time_machine.travel(timezone.now() + timedelta(hours=1), tick=False):
        processing.claim_event(event.pk)
    with time_machine.travel(timezone.now() + timedelta(hours=2), tick=False):
        processing.release(WebhookEvent.objects.get(pk=event.pk), actor="otto")
    (attempt,) = WebhookAttempt.objects.filter(event=event)
    assert (attempt.number, attempt.outcome) == (1, "released")
    assert attempt.duration_ms >= 3_600_000 - 1000


# --- references and the messages a handler causes -------------------------------------------------

def _refer_and_notify(event: WebhookEvent) -> None:
    charge = event.payload["id"].replace("evt", "ch")
    event.refer("stripe.charge", charge)
    outbox.enqueue("http.post", {"url": "http://127.0.0.1:9/hook", "json": {"charge": charge}}, f"notify-{charge}")


def test_a_handlers_references_are_stored_with_its_completion_and_its_message_names_the_event(registry):
    registry("stripe", "thing.happened", _refer_and_notify)
    event = make_event()
    assert processing.process_event(event.pk) == "completed"
    assert list(event.references.values_list("kind", "value")) == [("stripe.charge", "ch_1")]
    message = OutboxMessage.objects.get()
    assert (message.cause_kind, message.cause_id) == ("webhook_event", event.pk)
    assert cause_of(message) == event and list(caused_by(event)) == [message]
    assert objects_referring("ch_1").events == [event]


def test_a_failing_handlers_references_are_stored_with_the_failure_and_its_message_rolls_back(registry):
    def refer_then_fail(event: WebhookEvent) -> None:
        _refer_and_notify(event)
        raise RuntimeError("downstream is down")

    registry("stripe", "thing.happened", refer_then_fail)
    event = make_event()
    assert processing.process_event(event.pk) == "retry"
    assert list(event.references.values_list("value", flat=True)) == ["ch_1"]
    assert not OutboxMessage.objects.exists()  # the handler's transaction rolled back


def test_a_handler_that_loses_its_lease_stores_no_references(registry):
    def refer_then_lose_the_lease(event: WebhookEvent) -> None:
        event.refer("stripe.charge", "ch_lost")
        WebhookEvent.objects.filter(pk=event.pk).update(fencing_token=None)

    registry("stripe", "thing.happened", refer_then_lose_the_lease)
    event = make_event()
    assert processing.process_event(event.pk) == "lease_lost"
    assert not event.references.exists()


def test_event_refer_outside_its_handler_is_refused():
    event = make_event()
    with pytest.raises(RuntimeError):
        event.refer("stripe.charge", "ch_1")


# --- failures grouped by cause (idemdash/core/failures.py) -------------------------------------


def test_each_failure_of_a_handler_counts_in_its_group_and_the_event_knows_its_group_until_it_succeeds(settings):
    from idemdash.core.failures import FailureGroup

    settings.WEBHOOKS_MAX_ATTEMPTS = 2
    first = make_event("charge.failed")
    second = store_delivery(first.endpoint, VerifiedDelivery(0, {"id": "evt_2"}, "evt_2", "charge.failed", "evt_2", "")).event
    for event in (first, second, first):
        WebhookEvent.objects.filter(pk=event.pk).update(next_attempt_at=timezone.now())  # its retry is due
        processing.fail_event(processing.claim_event(event.pk), f"RuntimeError: ledger down for {event.provider_event_id}")
    group = FailureGroup.objects.get()
    assert (group.kind, group.place, group.cause, group.failures, group.sample_id) == (
        "event", "ep charge.failed", "RuntimeError: ledger down for evt_<n>", 3, first.pk)
    assert set(WebhookEvent.objects.values_list("status", "failure_signature")) == {
        ("dead", group.signature), ("retry", group.signature)}

    WebhookEvent.objects.filter(pk=second.pk).update(next_attempt_at=timezone.now())
    assert processing.complete_event(processing.claim_event(second.pk))
    assert WebhookEvent.objects.get(pk=second.pk).failure_signature == ""


def test_a_failure_whose_claim_was_lost_is_not_counted():
    from idemdash.core.failures import FailureGroup

    event = processing.claim_event(make_event().pk)
    WebhookEvent.objects.filter(pk=event.pk).update(fencing_token=None, status="retry")  # taken back meanwhile
    assert processing.fail_event(event, "RuntimeError: late") is None
    assert not FailureGroup.objects.exists()
