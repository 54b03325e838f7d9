"""The admin's stuck-release actions for webhook events and outbox messages call the same
domain functions as the dashboard (and are audited); deliveries and the outbox attempt log
have read-only admins."""

from __future__ import annotations

import pytest

from idemdash.core.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import outbox_message, webhook_event
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


def test_releasing_a_stuck_event_from_the_admin_is_audited_with_the_user(admin_client, admin_user):
    stuck = webhook_event("evt_1", "processing", minutes_ago=10)
    live = webhook_event("evt_2", "processing")
    response = admin_client.post("/admin/webhooks/webhookevent/",
                                 {"action": "release", "_selected_action": [stuck.pk, live.pk]})
    assert response.status_code == 302
    assert dict(WebhookEvent.objects.values_list("provider_event_id", "status")) == {"evt_1": "retry", "evt_2": "processing"}
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.user, entry.object_id) == ("webhook_event.release", admin_user, str(stuck.pk))


def test_releasing_a_stuck_message_from_the_admin_is_audited_with_the_user(admin_client, admin_user):
    m = outbox_message("m1", "in_flight", minutes_ago=10)
    admin_client.post("/admin/outbox/outboxmessage/", {"action": "release", "_selected_action": [m.pk]})
    assert OutboxMessage.objects.get(pk=m.pk).status == "retry"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.user, entry.actor) == ("outbox_message.release", admin_user, "admin")


def test_deliveries_and_outbox_attempts_have_read_only_admins(admin_client):
    event = webhook_event("evt_1", "received")
    m = outbox_message("m1", "dead", action="http.post")
    deliveries = admin_client.get("/admin/webhooks/webhookdelivery/", {"q": "evt_1"})
    assert deliveries.status_code == 200 and b"delivery of" in deliveries.content
    delivery = event.deliveries.get()
    page = admin_client.get(f"/admin/webhooks/webhookdelivery/{delivery.pk}/change/").content.decode()
    assert 'name="received_at"' not in page  # read-only
    attempts = admin_client.get("/admin/outbox/outboxattempt/", {"outcome__exact": "dead"})
    assert attempts.status_code == 200 and b"m1" in attempts.content
    assert admin_client.get("/admin/outbox/outboxattempt/add/").status_code == 403
    assert m.attempt_log.count() == 1
