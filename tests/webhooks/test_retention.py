from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.webhooks.conftest import make_endpoint
from idemdash.devtools.models import Fulfilment
from webhooks.models import RejectedDelivery, WebhookDelivery, WebhookEvent
from webhooks.receive import record_rejection, store_delivery
from webhooks.retention import due_events, due_rejections
from webhooks.verify import VerifiedDelivery

pytestmark = pytest.mark.django_db


def event_at(endpoint, key: str, when, status: str) -> WebhookEvent:
    event = store_delivery(endpoint, VerifiedDelivery(0, {}, key, "a.b", key, ""), now=when).event
    WebhookEvent.objects.filter(pk=event.pk).update(status=status)
    return event


def test_finished_events_past_retention_are_due_and_others_are_not(settings):
    settings.WEBHOOKS_EVENT_RETENTION_DAYS = 30
    endpoint = make_endpoint("ep", "stripe", "whsec_retention_000000000")
    now = timezone.now()
    old = now - timedelta(days=31)
    done = event_at(endpoint, "old-done", old, "completed")
    dead = event_at(endpoint, "old-dead", old, "dead")
    event_at(endpoint, "old-retry", old, "retry")  # unfinished: kept
    event_at(endpoint, "new-done", now - timedelta(days=29), "completed")
    redelivered = event_at(endpoint, "old-redelivered", old, "completed")
    store_delivery(endpoint, VerifiedDelivery(0, {}, "old-redelivered", "a.b", "", ""), now=now - timedelta(days=1))
    assert set(due_events(now)) == {done, dead}
    assert redelivered not in due_events(now)
    due_events(now).delete()
    assert WebhookDelivery.objects.filter(event_id__in=[done.pk, dead.pk]).count() == 0


def test_rejections_past_their_retention_are_due(settings):
    settings.WEBHOOKS_REJECTED_RETENTION_DAYS = 7
    now = timezone.now()
    old = record_rejection(None, "stripe", "missing_header", "", b"", now=now - timedelta(days=8))
    record_rejection(None, "stripe", "missing_header", "", b"", now=now - timedelta(days=6))
    assert list(due_rejections(now)) == [old]
    assert RejectedDelivery.objects.count() == 2


def test_the_purge_command_deletes_due_events_and_rejections_and_keeps_the_rest(settings):
    from django.core.management import call_command

    settings.WEBHOOKS_EVENT_RETENTION_DAYS = 30
    settings.WEBHOOKS_REJECTED_RETENTION_DAYS = 7
    endpoint = make_endpoint("ep", "stripe", "whsec_retention_000000000")
    now = timezone.now()
    event_at(endpoint, "old-done", now - timedelta(days=31), "completed")
    kept = event_at(endpoint, "new-done", now - timedelta(days=2), "completed")
    record_rejection(None, "stripe", "missing_header", "", b"", now=now - timedelta(days=8))
    fresh = record_rejection(None, "stripe", "missing_header", "", b"", now=now - timedelta(days=1))
    call_command("purge", "--batch-size", "1")
    assert list(WebhookEvent.objects.all()) == [kept]
    assert list(RejectedDelivery.objects.all()) == [fresh]


def purge_events_capturing_statements(events: int, deliveries_each: int, prefix: str) -> list[str]:
    from idemdash.core.retention import Purger, purge_batches

    endpoint = make_endpoint(f"ep-{prefix}", "stripe", "whsec_retention_000000000")
    old = timezone.now() - timedelta(days=31)
    for n in range(events):
        event = event_at(endpoint, f"{prefix}-{n}", old, "completed")
        for _ in range(deliveries_each - 1):
            store_delivery(endpoint, VerifiedDelivery(0, {}, event.dedupe_key, "a.b", "", ""), now=old)
        Fulfilment.objects.create(payment_id=f"pi_{prefix}_{n}", source_event=event)
    with CaptureQueriesContext(connection) as queries:
        result = purge_batches(Purger("webhooks.events", due_events), timezone.now(), batch_size=events, max_batches=1)
    assert result.deleted == events
    assert not WebhookDelivery.objects.exists() and not WebhookEvent.objects.exists()
    assert not Fulfilment.objects.filter(source_event__isnull=False).exists()  # SET_NULL still holds
    return [q["sql"] for q in queries]


def test_an_event_batch_and_its_deliveries_go_in_the_same_few_statements_however_many_there_are(settings):
    settings.WEBHOOKS_EVENT_RETENTION_DAYS = 30
    small = purge_events_capturing_statements(1, deliveries_each=1, prefix="small")
    large = purge_events_capturing_statements(150, deliveries_each=3, prefix="large")
    assert len(large) == len(small)
    # Django's collector would load every event (payload included) before deleting them.
    assert not [sql for sql in large if sql.startswith("SELECT") and "payload_sha256" in sql]


def test_the_purge_deletes_an_events_attempts_with_it(settings):
    from django.core.management import call_command

    from webhooks.models import WebhookAttempt

    settings.WEBHOOKS_EVENT_RETENTION_DAYS = 30
    endpoint = make_endpoint("ep", "stripe", "whsec_retention_000000000")
    now = timezone.now()
    old = event_at(endpoint, "old-done", now - timedelta(days=31), "completed")
    kept = event_at(endpoint, "new-done", now - timedelta(days=2), "completed")
    for event in (old, kept):
        for number in (1, 2):
            WebhookAttempt.objects.create(event=event, number=number, outcome="retry", started_at=now, finished_at=now)
    call_command("purge", "--batch-size", "1")
    assert set(WebhookAttempt.objects.values_list("event_id", flat=True)) == {kept.pk}
    assert WebhookAttempt.objects.count() == 2
