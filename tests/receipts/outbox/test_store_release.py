"""release (an in-flight message past its lease, taken from its drainer by an operator) and
send_again_many."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from idemdash.core import leases
from idemdash.core.models import AuditEntry
from receipts.outbox import store
from receipts.outbox.models import OutboxMessage
from tests.concurrently import assert_one_of_eight_operators_acts
from tests.receipts.outbox.test_store import claim_one, post

pytestmark = pytest.mark.django_db


def stuck_message(key: str = "k1") -> OutboxMessage:
    with time_machine.travel(timezone.now() - timedelta(minutes=10), tick=False):
        post(key)
        return claim_one()


def test_a_stuck_message_goes_back_to_retry_due_now_and_is_audited():
    m = stuck_message()
    released = store.release(m, actor="otto", reason="drainer host died")
    assert (released.status, released.lease_expires_at, released.attempts) == ("retry", None, 1)
    assert released.next_attempt_at <= timezone.now()
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after) == ("outbox_message.release", "in_flight", "retry")
    assert claim_one().key == "k1"  # the next drain takes it at once


def test_the_drainer_that_held_it_cannot_record_a_result_after_the_next_claim():
    held = stuck_message()
    store.release(OutboxMessage.objects.get(pk=held.pk), actor="otto")
    claim_one("d2")
    with pytest.raises(store.StaleClaim):
        store.mark_sent(held, drainer="d1")


def test_a_message_within_its_lease_is_refused():
    post("k1")
    m = claim_one()
    with pytest.raises(store.InvalidTransition):
        store.release(m, actor="otto")
    assert OutboxMessage.objects.get(pk=m.pk).status == "in_flight" and not AuditEntry.objects.exists()


def test_a_message_re_claimed_since_the_operator_looked_is_refused():
    seen = stuck_message()
    claim_one("d2")  # the expired lease is due: another drainer takes it, with a new token
    OutboxMessage.objects.filter(pk=seen.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(store.InvalidTransition):
        store.release(seen, actor="otto")
    assert not AuditEntry.objects.exists()


def test_send_again_many_sends_the_dead_messages_again_only_one_audit_entry_each():
    for key in ("d1", "d2"):
        post(key)
        store.mark_failed(claim_one(), "HTTP 400", permanent=True)
    post("waiting")
    result = store.send_again_many(OutboxMessage.objects.all(), actor="otto")
    assert (result.done, result.skipped) == (2, 0)
    assert dict(OutboxMessage.objects.values_list("key", "status")) == {"d1": "pending", "d2": "pending", "waiting": "pending"}
    assert AuditEntry.objects.filter(action="outbox_message.send_again").count() == 2


def test_send_again_many_stops_at_its_limit():
    for key in ("d1", "d2", "d3"):
        post(key)
        store.mark_failed(claim_one(), "HTTP 400", permanent=True)
    assert store.send_again_many(OutboxMessage.objects.all(), actor="otto", limit=2).done == 2
    assert OutboxMessage.objects.filter(status="dead").count() == 1


@pytest.mark.django_db(transaction=True)
def test_operators_releasing_one_stuck_message_at_once_release_it_once():
    """Eight operators (threads, each with its own connection) release the same stuck
    message at the same moment: exactly one release and one audit entry."""
    assert_one_of_eight_operators_acts(stuck_message(), store.release, store.InvalidTransition, "outbox_message.release")


def test_an_action_that_does_not_apply_is_refused_with_the_cores_exceptions():
    m = stuck_message()
    store.release(m, actor="otto")
    with pytest.raises(leases.NotApplicable):
        store.send_again(OutboxMessage.objects.get(pk=m.pk), actor="otto")
    assert issubclass(store.InvalidTransition, leases.NotApplicable) and issubclass(store.StaleClaim, leases.StaleToken)
