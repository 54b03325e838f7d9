from __future__ import annotations

import pytest
from django.utils import timezone

from idemdash.core.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import outbox_message

pytestmark = pytest.mark.django_db


def test_send_again_asks_for_confirmation_before_acting(operator_client):
    m = outbox_message("m1", "dead")
    html = operator_client.get(f"/outbox/{m.pk}/").content.decode()
    assert "Send again…" in html and 'data-live="false"' in html
    assert "Confirm send again" in operator_client.get(f"/outbox/{m.pk}/send-again/").content.decode()
    assert OutboxMessage.objects.get(pk=m.pk).status == "dead"


def test_send_now_makes_a_waiting_message_due_in_place(operator_client):
    m = outbox_message("m1", "retry", action="http.post")
    assert m.next_attempt_at > timezone.now()
    html = operator_client.post(f"/outbox/{m.pk}/send-now/", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="outboxmessage-summary"')
    assert "Sending message m1 now: it is due now. The outcome appears here when it lands." in html
    assert 'data-live="true"' in html and 'hx-trigger="every 2s' in html  # until the drain settles it
    assert OutboxMessage.objects.get(pk=m.pk).next_attempt_at <= timezone.now()
    assert AuditEntry.objects.get().action == "outbox_message.send_now"


def test_releasing_a_stuck_message_makes_it_due_and_is_audited(operator_client):
    m = outbox_message("m1", "in_flight", minutes_ago=10)
    operator_client.post(f"/outbox/{m.pk}/release/")
    m.refresh_from_db()
    assert (m.status, m.lease_expires_at) == ("retry", None) and m.next_attempt_at <= timezone.now()
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after) == ("outbox_message.release", "in_flight", "retry")


def test_a_message_within_its_lease_is_not_released(operator_client):
    m = outbox_message("m1", "in_flight")
    assert operator_client.post(f"/outbox/{m.pk}/release/", headers={"HX-Request": "true"}).status_code == 409
    assert OutboxMessage.objects.get(pk=m.pk).status == "in_flight" and not AuditEntry.objects.exists()


def test_an_action_that_does_not_fit_the_status_is_409(operator_client):
    m = outbox_message("m1", "sent")
    response = operator_client.post(f"/outbox/{m.pk}/send-again/", headers={"HX-Request": "true"})
    assert response.status_code == 409 and "Not done" in response.content.decode()
