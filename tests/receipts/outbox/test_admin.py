from __future__ import annotations

import pytest
from django.urls import reverse

from receipts.models import AuditEntry
from receipts.outbox import store
from receipts.outbox.models import OutboxMessage

pytestmark = pytest.mark.django_db

URL = "https://example.com/hook"


def dead_message(key: str) -> OutboxMessage:
    store.enqueue("http.post", {"url": URL}, key)
    (m,) = store.claim_batch("d1", batch_size=1)
    store.mark_failed(m, "HTTP 404", permanent=True)
    return OutboxMessage.objects.get(key=key)


def test_the_list_filters_by_status_and_searches_by_key(admin_client):
    dead_message("needle")
    store.enqueue("http.post", {"url": URL}, "hay")
    changelist = reverse("admin:outbox_outboxmessage_changelist")
    assert b"needle" in admin_client.get(changelist, {"status__exact": "dead"}).content
    assert b"hay" not in admin_client.get(changelist, {"q": "needle"}).content


def test_requeue_dead_from_the_admin_is_audited_with_the_user(admin_client, admin_user):
    m = dead_message("k1")
    pending = store.enqueue("http.post", {"url": URL}, "k2").message
    changelist = reverse("admin:outbox_outboxmessage_changelist")
    response = admin_client.post(
        changelist, {"action": "requeue_dead", "_selected_action": [m.pk, pending.pk]}, follow=True
    )
    assert response.status_code == 200
    assert OutboxMessage.objects.get(pk=m.pk).status == "pending"
    entry = AuditEntry.objects.get()  # the pending message was refused, not audited
    assert (entry.actor, entry.user, entry.action) == ("admin:admin", admin_user, "outbox.requeue_dead")


def test_the_message_page_shows_the_payload_read_only(admin_client):
    m = dead_message("k3")
    page = admin_client.get(reverse("admin:outbox_outboxmessage_change", args=[m.pk]))
    assert page.status_code == 200
    assert b'name="payload"' not in page.content and b"example.com/hook" in page.content
