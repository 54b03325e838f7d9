from __future__ import annotations

import pytest

from idemdash.core.models import AuditEntry
from tests.webhooks.conftest import STRIPE_SECRET, deliver_stripe, make_endpoint, stripe_event
from webhooks.admin import SecretForm
from webhooks.models import WebhookEvent, WebhookSecret, mask_secret

pytestmark = pytest.mark.django_db


@pytest.fixture
def endpoint():
    return make_endpoint("shop", "stripe", STRIPE_SECRET)


def test_secrets_are_shown_masked_and_never_in_full(admin_client, endpoint):
    for url in ("/admin/webhooks/webhookendpoint/", f"/admin/webhooks/webhookendpoint/{endpoint.pk}/change/"):
        page = admin_client.get(url).content.decode()
        assert STRIPE_SECRET not in page
        assert "whsec_…cdef" in page


def test_a_rejected_delivery_page_does_not_show_the_secret(admin_client, client, endpoint):
    deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret="whsec_wrong_wrong_wrong_00")
    page = admin_client.get("/admin/webhooks/rejecteddelivery/").content.decode()
    assert "no_matching_signature" in page and STRIPE_SECRET not in page


def test_the_mask_keeps_the_prefix_and_last_four():
    assert mask_secret("whsec_abcdefghijklmnop1234") == "whsec_…1234"
    assert mask_secret("short") == "…"
    assert repr(WebhookSecret(secret=STRIPE_SECRET)).endswith("whsec_…cdef>")


def test_an_empty_secret_field_keeps_the_stored_secret(endpoint):
    stored = endpoint.secrets.get()
    form = SecretForm(data={"secret": "", "active": ""}, instance=stored)
    assert form.is_valid(), form.errors
    form.save()
    stored.refresh_from_db()
    assert stored.secret == STRIPE_SECRET and not stored.active
    assert 'value="' + STRIPE_SECRET not in str(SecretForm(instance=stored)["secret"])


def test_a_new_secret_needs_a_value(endpoint):
    form = SecretForm(data={"secret": "", "active": "on"}, instance=WebhookSecret(endpoint=endpoint))
    assert not form.is_valid()
    form = SecretForm(data={"secret": "whsec_new_secret_000000000", "active": "on"}, instance=WebhookSecret(endpoint=endpoint))
    assert form.is_valid()
    form.save()
    assert endpoint.secrets.filter(active=True).count() == 2


def test_the_reprocess_action_is_audited_with_the_admin_user(admin_client, admin_user, client, endpoint):
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    event = WebhookEvent.objects.get()
    WebhookEvent.objects.filter(pk=event.pk).update(status="dead")
    response = admin_client.post(
        "/admin/webhooks/webhookevent/", {"action": "reprocess", "_selected_action": [event.pk]}
    )
    assert response.status_code == 302
    assert WebhookEvent.objects.get(pk=event.pk).status == "received"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.user, entry.status_before) == ("webhook_event.reprocess", admin_user, "dead")


def test_pause_and_resume_actions_hold_and_release(admin_client, client, endpoint):
    admin_client.post("/admin/webhooks/webhookendpoint/", {"action": "pause_endpoints", "_selected_action": [endpoint.pk]})
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    assert WebhookEvent.objects.get().status == "held"
    held = WebhookEvent.objects.get().received_at
    listing = admin_client.get("/admin/webhooks/webhookendpoint/").content.decode()
    assert f'<td class="field-held_backlog">1 (since {held:%Y-%m-%d %H:%M:%S} UTC)</td>' in listing
    admin_client.post("/admin/webhooks/webhookendpoint/", {"action": "resume_endpoints", "_selected_action": [endpoint.pk]})
    assert WebhookEvent.objects.get().status == "received"


def test_the_event_page_lists_its_deliveries(admin_client, client, endpoint):
    payload = stripe_event({}, "a.b")
    deliver_stripe(client, "shop", payload)
    deliver_stripe(client, "shop", payload)
    event = WebhookEvent.objects.get()
    page = admin_client.get(f"/admin/webhooks/webhookevent/{event.pk}/change/")
    assert page.status_code == 200
    assert page.content.decode().count(f"delivery of {event.pk} at") == 2


def test_an_endpoint_and_its_secret_are_added_in_the_admin(admin_client):
    response = admin_client.post(
        "/admin/webhooks/webhookendpoint/add/",
        {
            "slug": "billing",
            "provider": "stripe",
            "description": "",
            "secrets-TOTAL_FORMS": "1",
            "secrets-INITIAL_FORMS": "0",
            "secrets-MIN_NUM_FORMS": "0",
            "secrets-MAX_NUM_FORMS": "1000",
            "secrets-0-secret": "whsec_added_through_admin_9876",
            "secrets-0-active": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    secret = WebhookSecret.objects.get(endpoint__slug="billing")
    assert secret.secret == "whsec_added_through_admin_9876" and secret.active
    page = admin_client.get(f"/admin/webhooks/webhookendpoint/{secret.endpoint_id}/change/").content.decode()
    assert "whsec_added_through_admin_9876" not in page and "whsec_…9876" in page


@pytest.mark.django_db
def test_the_event_search_finds_a_handlers_reference_and_the_page_lists_it(admin_client):
    from django.urls import reverse

    from tests.dashboard.build import handled_event

    event, _ = handled_event("evt_admin_1", "ch_admin_1")
    found = admin_client.get(reverse("admin:webhooks_webhookevent_changelist"), {"q": "ch_admin_1"}).content.decode()
    assert "evt_admin_1" in found
    page = admin_client.get(reverse("admin:webhooks_webhookevent_change", args=[event.pk])).content.decode()
    assert "ch_admin_1" in page
