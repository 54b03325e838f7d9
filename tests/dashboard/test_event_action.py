from __future__ import annotations

import pytest

from idemdash.core.models import AuditEntry
from tests.dashboard.build import webhook_event
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


def test_reprocess_asks_for_confirmation_before_acting(operator_client):
    event = webhook_event("evt_1", "dead")
    html = operator_client.get(f"/events/{event.pk}/reprocess/").content.decode()
    assert "Confirm reprocess" in html and 'name="csrfmiddlewaretoken"' in html
    assert WebhookEvent.objects.get(pk=event.pk).status == "dead"


def test_with_htmx_the_summary_is_swapped_in_place_with_the_new_status(operator_client):
    event = webhook_event("evt_1", "dead")
    html = operator_client.post(f"/events/{event.pk}/reprocess/", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="webhookevent-summary"') and 'data-status="received"' in html
    assert "Reprocessing event evt_1: it is received and handed to a worker now." in html
    # Not final: the summary polls the event page until the worker's outcome lands.
    assert 'data-live="true"' in html and f'hx-get="/events/{event.pk}/" hx-trigger="every 2s' in html


def test_a_finished_event_page_does_not_poll_and_a_stuck_one_offers_release_stuck(operator_client, viewer_client):
    dead, stuck = webhook_event("evt_1", "dead"), webhook_event("evt_2", "processing", minutes_ago=30)
    html = operator_client.get(f"/events/{dead.pk}/").content.decode()
    assert 'data-live="false"' in html and "every 2s" not in html and "Reprocess…" in html
    assert "Release (stuck)…" in operator_client.get(f"/events/{stuck.pk}/").content.decode()
    viewed = viewer_client.get(f"/events/{stuck.pk}/").content.decode()
    assert "Release (stuck)…" not in viewed and 'data-live="true"' in viewed


def test_releasing_a_stuck_event_says_where_it_went(operator_client):
    event = webhook_event("evt_1", "processing", minutes_ago=30)
    html = operator_client.post(f"/events/{event.pk}/release/", headers={"HX-Request": "true"}).content.decode()
    assert "Released event evt_1 from its stuck worker: it is retry now." in html


def test_an_event_being_processed_is_refused_with_409(operator_client):
    event = webhook_event("evt_1", "processing")
    response = operator_client.post(f"/events/{event.pk}/reprocess/", headers={"HX-Request": "true"})
    assert response.status_code == 409 and "Not done" in response.content.decode()
    assert not AuditEntry.objects.exists()


def test_releasing_a_stuck_event_returns_it_to_retry_and_fences_its_worker(operator_client):
    event = webhook_event("evt_1", "processing", minutes_ago=10)
    token = event.fencing_token
    response = operator_client.post(f"/events/{event.pk}/release/", {"next": "/stuck/"})
    assert response["Location"] == "/stuck/"
    event.refresh_from_db()
    assert (event.status, event.fencing_token, event.stuck_recoveries) == ("retry", None, 1)
    assert token is not None
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after) == ("webhook_event.release", "processing", "retry")


def test_an_event_within_its_lease_is_not_released(operator_client):
    event = webhook_event("evt_1", "processing")
    assert operator_client.post(f"/events/{event.pk}/release/", headers={"HX-Request": "true"}).status_code == 409
    assert WebhookEvent.objects.get(pk=event.pk).status == "processing"


def test_the_reprocess_confirmation_lists_the_message_its_handler_already_sent(operator_client):
    from receipts.outbox.models import OutboxMessage
    from tests.dashboard.build import handled_event

    event, message = handled_event("evt_sent", "ch_sent")
    OutboxMessage.objects.filter(pk=message.pk).update(status="sent")
    html = operator_client.get(f"/events/{event.pk}/reprocess/").content.decode()
    preflight = html.split('data-role="side-effects"')[1].split("</div>")[0]
    assert "1 side effect sent" in preflight
    assert 'data-side-effect="message" data-status="sent"' in preflight and "notify-ch_sent" in preflight
    assert 'data-role="downstream-key">notify-ch_sent<' in preflight
    assert 'class="button danger"' in html  # the confirm button says it is not harmless


def test_an_event_that_caused_nothing_shows_no_preflight(operator_client):
    event = webhook_event("evt_quiet", "dead")
    assert 'data-role="side-effects"' not in operator_client.get(f"/events/{event.pk}/reprocess/").content.decode()
