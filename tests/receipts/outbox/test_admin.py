from __future__ import annotations

import re

import pytest
from django.urls import reverse

from idemdash.core.masking import MASK, masked
from idemdash.core.models import AuditEntry
from receipts.outbox import store
from receipts.outbox.models import OutboxAttempt, OutboxMessage

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


def test_send_again_from_the_admin_is_audited_with_the_username(admin_client, admin_user):
    m = dead_message("k1")
    pending = store.enqueue("http.post", {"url": URL}, "k2").message
    changelist = reverse("admin:outbox_outboxmessage_changelist")
    response = admin_client.post(
        changelist, {"action": "send_again", "_selected_action": [m.pk, pending.pk]}, follow=True
    )
    assert response.status_code == 200
    assert OutboxMessage.objects.get(pk=m.pk).status == "pending"
    entry = AuditEntry.objects.get()  # the pending message was refused, not audited
    assert (entry.actor, entry.user, entry.action) == ("admin", admin_user, "outbox_message.send_again")


def test_the_message_page_shows_the_payload_read_only(admin_client):
    m = dead_message("k3")
    page = admin_client.get(reverse("admin:outbox_outboxmessage_change", args=[m.pk]))
    assert page.status_code == 200
    assert b'name="payload"' not in page.content and b"example.com/hook" in page.content


CREDENTIALS = {
    "Authorization": "Bearer s3cret-bearer",
    "X-Api-Key": "s3cret-api-key",
    "Cookie": "session=s3cret-cookie",
    "X-Hub-Signature": "sha256=s3cret-signature",
}


def message_with_credentials(key: str = "with-creds") -> OutboxMessage:
    headers = {**CREDENTIALS, "X-Trace": "trace-in-clear"}
    message = store.enqueue("http.post", {"url": URL, "headers": headers, "json": {"a": 1}}, key).message
    (claimed,) = store.claim_batch("d1", batch_size=1)
    store.mark_failed(claimed, "HTTP 503", permanent=False)
    return message


def test_no_admin_page_shows_a_payload_credential_and_the_message_page_masks_them(admin_client):
    m = message_with_credentials()
    attempt = OutboxAttempt.objects.get(message=m)
    pages = [
        reverse("admin:outbox_outboxmessage_changelist"),
        reverse("admin:outbox_outboxmessage_change", args=[m.pk]),
        reverse("admin:outbox_outboxattempt_changelist"),
        reverse("admin:outbox_outboxattempt_change", args=[attempt.pk]),
        reverse("admin:idemdash_core_auditentry_changelist"),
    ]
    for page in pages:
        response = admin_client.get(page)
        assert response.status_code == 200, page
        assert b"s3cret" not in response.content, page
    change = admin_client.get(pages[1]).content.decode()
    assert change.count(MASK) == len(CREDENTIALS) and "trace-in-clear" in change and "X-Api-Key" in change


def test_the_admin_masks_exactly_what_the_dashboard_masks(admin_client, viewer_client):
    m = message_with_credentials()
    shown = masked(m.payload)["headers"]
    assert set(shown.values()) == {MASK, "trace-in-clear"}
    admin_page = admin_client.get(reverse("admin:outbox_outboxmessage_change", args=[m.pk])).content.decode()
    dashboard_page = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    for page in (admin_page, dashboard_page):
        assert page.count(MASK) == list(shown.values()).count(MASK)
        assert "trace-in-clear" in page and not any(value in page for value in CREDENTIALS.values())


def test_the_change_form_cannot_write_the_payload(admin_client):
    m = message_with_credentials()
    admin_client.post(reverse("admin:outbox_outboxmessage_change", args=[m.pk]), {"payload": '{"url": "http://10.0.0.1/"}'})
    assert OutboxMessage.objects.get(pk=m.pk).payload["url"] == URL


def test_url_userinfo_and_configured_headers_are_masked_on_the_admin_page_and_the_dashboard(
        admin_client, viewer_client, settings):
    settings.RECEIPTS_MASKED_HEADERS = ["x-tenant"]
    m = store.enqueue("http.post", {"url": "https://alice:s3cret-pw@example.com/hook",
                                    "headers": {"X-Tenant": "tenant-secret", "X-Trace": "trace-in-clear"}}, "ui-1").message
    admin_page = admin_client.get(reverse("admin:outbox_outboxmessage_change", args=[m.pk])).content.decode()
    dashboard_page = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    for page in (admin_page, dashboard_page):
        assert "s3cret-pw" not in page and "tenant-secret" not in page
        assert f"https://{MASK}@example.com/hook" in page and "trace-in-clear" in page


def test_a_pause_added_in_the_admin_goes_through_pauses_pause_and_is_audited_once(admin_client):
    from receipts.outbox.models import OutboxPause

    store.enqueue("http.post", {"url": "https://api.example.com/hook"}, "to-api")
    add = reverse("admin:outbox_outboxpause_add")
    for _ in range(2):
        response = admin_client.post(add, {"kind": "host", "target": "API.Example.com", "note": "403s"}, follow=True)
        assert response.status_code == 200
    assert list(OutboxPause.objects.values_list("kind", "target", "paused_by")) == [("host", "api.example.com", "admin")]
    assert AuditEntry.objects.filter(action="outbox_pause.pause").count() == 1
    assert b"was paused already" in response.content

    bad = admin_client.post(add, {"kind": "host", "target": "https://x/y"})
    assert bad.status_code == 200 and b"no scheme, path or port" in bad.content  # the form again, with why
    assert OutboxPause.objects.count() == 1


def test_the_admin_lists_a_pause_with_its_backlog_and_resumes_it_through_the_domain(admin_client):
    from receipts.outbox import pauses
    from receipts.outbox.models import OutboxPause

    store.enqueue("http.post", {"url": URL}, "waiting-1")
    pauses.pause("host", "example.com", actor="ops")
    changelist = reverse("admin:outbox_outboxpause_changelist")
    html = admin_client.get(changelist).content.decode()
    assert "example.com" in html and '<td class="field-waiting">1</td>' in html
    pause = OutboxPause.objects.get()
    admin_client.post(changelist, {"action": "resume", "_selected_action": [pause.pk]}, follow=True)
    assert not OutboxPause.objects.exists()
    assert AuditEntry.objects.filter(action="outbox_pause.resume", actor="admin").count() == 1
    assert "delete_selected" not in admin_client.get(changelist).content.decode()


def test_the_search_finds_a_message_by_a_references_exact_value_and_its_page_shows_references_and_cause(admin_client):
    import receipts
    from receipts.models import Receipt

    receipts.run_once("order-42", "payment.create", lambda: store.enqueue(
        "http.post", {"url": URL}, "mail-42", references=[("order", "42")]) and None)
    store.enqueue("http.post", {"url": URL}, "hay", references=[("order", "421")])
    changelist = reverse("admin:outbox_outboxmessage_changelist")
    found = admin_client.get(changelist, {"q": "42"}).content.decode()
    assert "mail-42" in found and ">hay<" not in found
    message, receipt = OutboxMessage.objects.get(key="mail-42"), Receipt.objects.get()
    page = admin_client.get(reverse("admin:outbox_outboxmessage_change", args=[message.pk])).content.decode()
    assert reverse("admin:receipts_receipt_change", args=[receipt.pk]) in page
    assert re.search(r'class="field-value">\s*<p>42</p>', page)
