from __future__ import annotations

import pytest

from tests.dashboard.build import outbox_message

pytestmark = pytest.mark.django_db


def test_it_shows_the_attempt_log_with_errors_and_the_payload(viewer_client):
    m = outbox_message("m1", "dead", action="http.post")
    html = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    assert "#1 dead" in html and "HTTP 400" in html and "HTTP 400: bad request" in html
    assert "127.0.0.1:9/hook" in html


def test_credentials_in_the_payload_headers_are_masked(viewer_client):
    m = outbox_message("m1", "pending", action="http.post")
    html = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    assert "s3cret-token" not in html and "••••" in html


def test_a_message_never_tried_says_so(viewer_client):
    m = outbox_message("m1", "pending")
    assert "Not attempted yet" in viewer_client.get(f"/outbox/{m.pk}/").content.decode()


@pytest.mark.parametrize("status,action", [("pending", "send-now"), ("retry", "send-now"), ("dead", "send-again")])
def test_operators_get_the_action_that_fits_the_status(operator_client, status, action):
    m = outbox_message("m1", status, action="http.post")
    assert f'hx-get="/outbox/{m.pk}/{action}/"' in operator_client.get(f"/outbox/{m.pk}/").content.decode()


def test_viewers_get_no_action(viewer_client):
    m = outbox_message("m1", "dead")
    assert "Send again…" not in viewer_client.get(f"/outbox/{m.pk}/").content.decode()


def test_an_unknown_message_is_404(viewer_client):
    assert viewer_client.get("/outbox/999999/").status_code == 404


def test_it_links_to_the_receipt_it_was_enqueued_under(viewer_client):
    from tests.dashboard.build import charged

    receipt, message = charged("order-1042", "ch_3MtwBw")
    html = viewer_client.get(f"/outbox/{message.pk}/").content.decode()
    assert f'the receipt <a href="/receipts/{receipt.pk}/">order-1042</a>' in html


def test_it_links_to_the_webhook_event_it_was_enqueued_under(viewer_client):
    from tests.dashboard.build import handled_event

    event, message = handled_event("evt_charge_1", "ch_evt_1")
    html = viewer_client.get(f"/outbox/{message.pk}/").content.decode()
    assert f'the webhook event <a href="/events/{event.pk}/">charge.succeeded evt_charge_1</a>' in html


def test_a_message_whose_cause_was_purged_names_it_by_id(viewer_client):
    from receipts.models import Receipt
    from tests.dashboard.build import charged

    receipt, message = charged("order-1042", "ch_3MtwBw")
    Receipt.objects.filter(pk=receipt.pk).delete()
    html = viewer_client.get(f"/outbox/{message.pk}/").content.decode()
    assert f"receipt #{receipt.pk} <span class=\"muted\">(purged)</span>" in html


def test_references_given_at_enqueue_are_shown(viewer_client):
    from receipts.outbox import store as outbox_store

    m = outbox_store.enqueue("email.send", {"to": "a@example.com", "subject": "s", "body": "b"}, "m-ref",
                             references=[("order", "77")]).message
    html = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    assert 'data-reference="order:77"' in html
