from __future__ import annotations

import re

import pytest

from tests.dashboard.build import webhook_event
from webhooks.models import WebhookDelivery, WebhookEvent
from webhooks.receive import store_delivery
from webhooks.verify import VerifiedDelivery

pytestmark = pytest.mark.django_db


def test_it_shows_the_delivery_history_the_error_and_the_payload(viewer_client):
    event = webhook_event("evt_1", "dead", payload={"id": "evt_1", "amount": 4200})
    store_delivery(event.endpoint, VerifiedDelivery(0, {"id": "evt_1", "amount": 1}, "evt_1", "invoice.paid", "evt_1", ""))
    html = viewer_client.get(f"/events/{event.pk}/").content.decode()
    assert html.count("<time") >= 2 and "redelivery" in html and "differs" in html
    assert "a redelivery's payload differed" in html
    assert 'data-role="traceback"' in html and "RuntimeError: ledger down" in html
    assert "&quot;amount&quot;: 4200" in html  # pretty-printed, the first payload kept
    assert WebhookDelivery.objects.filter(event=event).count() == 2


def test_operators_get_reprocess_on_a_dead_event_and_viewers_do_not(operator_client, viewer_client):
    event = webhook_event("evt_1", "dead")
    assert f'hx-get="/events/{event.pk}/reprocess/"' in operator_client.get(f"/events/{event.pk}/").content.decode()
    assert "Reprocess…" not in viewer_client.get(f"/events/{event.pk}/").content.decode()


def test_a_stuck_event_offers_release_instead(operator_client):
    event = webhook_event("evt_1", "processing", minutes_ago=10)
    html = operator_client.get(f"/events/{event.pk}/").content.decode()
    assert "stuck: lease expired" in html and f'href="/events/{event.pk}/release/"' in html


def test_an_unknown_event_is_404(viewer_client):
    assert viewer_client.get("/events/999999/").status_code == 404


def test_every_attempt_is_listed_with_its_own_error(viewer_client):
    from webhooks import processing

    event = webhook_event("evt_twice", "retry")  # attempt 1 failed: "RuntimeError: try again"
    WebhookEvent.objects.filter(pk=event.pk).update(next_attempt_at=event.received_at)
    claimed = processing.claim_event(event.pk)
    processing.fail_event(claimed, "RuntimeError: second failure")
    html = viewer_client.get(f"/events/{event.pk}/").content.decode()
    attempts = re.findall(r'data-attempt="(\d+)".*?#\d+ (\w+)</span>.*?<pre[^>]*>([^<]*)</pre>', html, re.S)
    assert [(n, outcome, error.strip()) for n, outcome, error in attempts] == [
        ("1", "retry", "RuntimeError: try again"),
        ("2", "retry", "RuntimeError: second failure"),
    ]
    assert re.search(r"\d\d:\d\d:\d\d UTC</time> → <time[^>]*>\d\d:\d\d:\d\d UTC</time>", html)


def test_an_event_never_attempted_says_so(viewer_client):
    event = webhook_event("evt_new")
    assert "Not attempted yet" in viewer_client.get(f"/events/{event.pk}/").content.decode()


def test_it_shows_the_handlers_references_and_links_to_the_messages_it_enqueued(viewer_client):
    from tests.dashboard.build import handled_event

    event, message = handled_event("evt_charge_1", "ch_evt_1")
    html = viewer_client.get(f"/events/{event.pk}/").content.decode()
    assert 'data-reference="stripe.charge:ch_evt_1"' in html
    assert f'<a href="/outbox/{message.pk}/"><code class="break">notify-ch_evt_1</code></a>' in html
