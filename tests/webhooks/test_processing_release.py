"""release (the sweeper's recovery for one event, by an operator) and reprocess_many."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from idemdash.core import leases
from idemdash.core.models import AuditEntry
from tests.concurrently import assert_one_of_eight_operators_acts
from webhooks import processing
from webhooks.models import WebhookEndpoint, WebhookEvent
from webhooks.receive import store_delivery
from webhooks.verify import VerifiedDelivery

pytestmark = pytest.mark.django_db


def make_event() -> WebhookEvent:
    endpoint, _ = WebhookEndpoint.objects.get_or_create(slug="ep", defaults={"provider": "stripe"})
    key = f"evt_{WebhookEvent.objects.count() + 1}"
    return store_delivery(endpoint, VerifiedDelivery(0, {"id": key}, key, "thing.happened", key, "")).event


def stuck_event(minutes_ago: int = 10) -> WebhookEvent:
    with time_machine.travel(timezone.now() - timedelta(minutes=minutes_ago), tick=False):
        return processing.claim_event(make_event().pk)


def test_a_stuck_event_goes_back_to_retry_due_now_and_is_audited():
    event = stuck_event()
    released = processing.release(event, actor="otto", reason="worker host died")
    assert (released.status, released.fencing_token, released.lease_expires_at) == ("retry", None, None)
    assert released.next_attempt_at <= timezone.now() and released.stuck_recoveries == 1
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after, entry.detail) == (
        "webhook_event.release", "processing", "retry", "worker host died")


def test_the_worker_that_held_it_can_no_longer_complete_it():
    event = stuck_event()
    processing.release(WebhookEvent.objects.get(pk=event.pk), actor="otto")
    assert processing.complete_event(event) is False  # its claim token is gone
    assert WebhookEvent.objects.get(pk=event.pk).status == "retry"


def test_an_event_out_of_attempts_is_released_dead(settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    released = processing.release(stuck_event(), actor="otto")
    assert released.status == "dead" and released.finished_at is not None
    assert AuditEntry.objects.get().status_after == "dead"


def test_an_event_within_its_lease_is_refused():
    event = processing.claim_event(make_event().pk)
    with pytest.raises(processing.NotStuck):
        processing.release(event, actor="otto")
    assert WebhookEvent.objects.get(pk=event.pk).status == "processing" and not AuditEntry.objects.exists()


def test_an_event_re_claimed_since_the_operator_looked_is_refused():
    seen = stuck_event()
    WebhookEvent.objects.filter(pk=seen.pk).update(status="retry", next_attempt_at=timezone.now())
    assert processing.claim_event(seen.pk) is not None  # a worker took it again: new token, live lease
    WebhookEvent.objects.filter(pk=seen.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(processing.NotStuck):
        processing.release(seen, actor="otto")  # the token the operator saw is stale
    assert not AuditEntry.objects.exists()


def test_an_action_that_does_not_apply_is_refused_with_the_cores_exceptions():
    event = stuck_event()
    processing.release(event, actor="otto")
    assert WebhookEvent.objects.get(pk=event.pk).status == "retry"
    with pytest.raises(leases.NotApplicable):
        processing.release(WebhookEvent.objects.get(pk=event.pk), actor="otto")
    assert issubclass(processing.NotStuck, leases.NotApplicable)
    assert issubclass(processing.NotReprocessable, leases.NotApplicable)
    assert issubclass(processing.LeaseLost, leases.StaleToken)


def test_reprocess_many_reprocesses_the_dead_events_only_one_audit_entry_each(settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    dead = []
    for _ in range(3):
        event = processing.claim_event(make_event().pk)
        processing.fail_event(event, "boom")
        dead.append(event.pk)
    live = make_event()
    result = processing.reprocess_many(WebhookEvent.objects.all(), actor="otto", reason="fixed")
    assert (result.done, result.skipped) == (3, 0)
    assert set(WebhookEvent.objects.filter(pk__in=dead).values_list("status", flat=True)) == {"received"}
    assert WebhookEvent.objects.get(pk=live.pk).status == "received"
    assert AuditEntry.objects.filter(action="webhook_event.reprocess").count() == 3


def test_reprocess_many_stops_at_its_limit(settings):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    for _ in range(3):
        processing.fail_event(processing.claim_event(make_event().pk), "boom")
    result = processing.reprocess_many(WebhookEvent.objects.all(), actor="otto", limit=2)
    assert result.done == 2 and WebhookEvent.objects.filter(status="dead").count() == 1


@pytest.mark.django_db(transaction=True)
def test_operators_releasing_one_stuck_event_at_once_release_it_once():
    """Eight operators (threads, each with its own connection) release the same stuck event
    at the same moment: exactly one release, one audit entry, one recovery counted."""
    event = stuck_event()
    assert_one_of_eight_operators_acts(event, processing.release, processing.NotStuck, "webhook_event.release")
    assert WebhookEvent.objects.get(pk=event.pk).stuck_recoveries == 1
