"""idemdash/dashboard/views/pauses.py: the Paused page and panel, pausing and resuming outbox
sending (an action or a host) and webhook endpoints' processing."""

from __future__ import annotations

import pytest
from django.test import Client

from idemdash.core.models import AuditEntry
from receipts.outbox import pauses
from receipts.outbox.models import OutboxPause
from tests.dashboard.build import outbox_message, webhook_event
from webhooks.models import WebhookEndpoint, WebhookEvent

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def host_message(key: str, host: str = "api.example.com"):
    return outbox_message(key, action="http.post", payload={"url": f"https://{host}/hook", "json": {}})


def test_pausing_a_host_twice_is_one_pause_and_one_audit_entry(operator_client):
    host_message("m0")
    first = operator_client.post("/paused/outbox/pause/", {"kind": "host", "target": "API.example.com", "note": "403s"},
                                 headers=HTMX)
    again = operator_client.post("/paused/outbox/pause/", {"kind": "host", "target": "api.example.com"}, headers=HTMX)
    assert first.status_code == again.status_code == 200
    assert "Paused sending for destination host api.example.com" in first.content.decode()
    assert "was paused already: nothing changed" in again.content.decode()
    assert OutboxPause.objects.count() == 1
    assert list(AuditEntry.objects.values_list("action", "actor")) == [("outbox_pause.pause", "otto")]


def test_the_panel_shows_the_backlog_and_its_age_and_resuming_sends_the_worker_at_it(operator_client):
    host_message("m1", "api.example.com")
    host_message("m2", "api.example.com")
    host_message("m3", "elsewhere.example.com")
    pauses.pause("host", "api.example.com", actor="otto")
    html = operator_client.get("/paused/").content.decode()
    assert 'data-kind="host" data-target="api.example.com" data-waiting="2"' in html
    assert "ago" in html and "Resume" in html
    html = operator_client.post("/paused/outbox/resume/", {"kind": "host", "target": "api.example.com"},
                                headers=HTMX).content.decode()
    assert "Resumed sending for destination host api.example.com" in html
    assert 'data-role="outbox-pauses-none"' in html
    entry = AuditEntry.objects.get(action="outbox_pause.resume")
    assert entry.detail == "destination host api.example.com: 2 waiting messages to send"
    again = operator_client.post("/paused/outbox/resume/", {"kind": "host", "target": "api.example.com"}, headers=HTMX)
    assert "was not paused: nothing changed" in again.content.decode()
    assert AuditEntry.objects.filter(action="outbox_pause.resume").count() == 1


def test_without_htmx_a_pause_goes_back_to_the_page_it_came_from(operator_client):
    response = operator_client.post("/paused/outbox/pause/", {"kind": "action", "target": "http.post", "next": "/outbox/"})
    assert response.status_code == 302 and response["Location"] == "/outbox/"
    response = operator_client.post("/paused/outbox/pause/", {"kind": "action", "target": "x", "next": "https://evil.example/"})
    assert response["Location"] == "/paused/"


@pytest.mark.parametrize("data", [
    {"kind": "host", "target": ""}, {"kind": "host", "target": "https://x/y"}, {"kind": "nope", "target": "x"},
    {"kind": "action", "target": "a" * 5000}, {"kind": "host", "target": "evil\u202eexample"}, {},
])
def test_bad_input_is_a_400_that_says_why_and_writes_nothing(operator_client, data):
    for url in ("/paused/outbox/pause/", "/paused/outbox/resume/"):
        response = operator_client.post(url, data, headers=HTMX)
        assert response.status_code == 400
        assert "Not paused:" in response.content.decode() or "Not resumed:" in response.content.decode()
    assert not OutboxPause.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.parametrize("url", ["/paused/outbox/pause/", "/paused/outbox/resume/", "/paused/endpoints/{pk}/pause/",
                                 "/paused/endpoints/{pk}/resume/"])
def test_viewers_get_403_and_change_nothing(viewer_client, url):
    endpoint = WebhookEndpoint.objects.create(slug="stripe", provider="stripe")
    response = viewer_client.post(url.format(pk=endpoint.pk), {"kind": "action", "target": "http.post"})
    assert response.status_code == 403
    assert not OutboxPause.objects.exists() and not WebhookEndpoint.objects.get().paused
    assert not AuditEntry.objects.exists()


def test_viewers_see_the_panel_without_its_buttons(viewer_client):
    pauses.pause("action", "http.post", actor="otto")
    html = viewer_client.get("/paused/").content.decode()
    assert 'data-target="http.post"' in html
    assert "/paused/outbox/resume/" not in html and "Pause sending" not in html


def test_anonymous_users_go_to_the_login_page(client):
    response = client.post("/paused/outbox/pause/", {"kind": "action", "target": "http.post"})
    assert response.status_code == 302 and "login" in response["Location"]
    assert not OutboxPause.objects.exists()


def test_a_pause_without_its_csrf_token_is_refused(operator):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post("/paused/outbox/pause/", {"kind": "action", "target": "http.post"}).status_code == 403
    endpoint = WebhookEndpoint.objects.create(slug="stripe", provider="stripe")
    assert c.post(f"/paused/endpoints/{endpoint.pk}/pause/").status_code == 403
    assert not OutboxPause.objects.exists() and not WebhookEndpoint.objects.get().paused


def test_get_is_not_allowed_on_the_actions(operator_client):
    assert operator_client.get("/paused/outbox/pause/?kind=action&target=http.post").status_code == 405
    assert not OutboxPause.objects.exists()


def test_pausing_an_endpoint_holds_its_waiting_events_and_resuming_releases_them(operator_client):
    event = webhook_event("evt_1", "received")
    endpoint = event.endpoint
    html = operator_client.post(f"/paused/endpoints/{endpoint.pk}/pause/", headers=HTMX).content.decode()
    assert f"Paused endpoint {endpoint.slug}" in html
    assert 'data-endpoint="stripe" data-paused="true" data-held="1"' in html
    again = operator_client.post(f"/paused/endpoints/{endpoint.pk}/pause/", headers=HTMX).content.decode()
    assert "was paused already: nothing changed" in again
    assert WebhookEvent.objects.get().status == "held"
    html = operator_client.post(f"/paused/endpoints/{endpoint.pk}/resume/", headers=HTMX).content.decode()
    assert "1 held event(s) handed to workers" in html
    assert WebhookEvent.objects.get().status == "received"
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "webhook_endpoint.pause", "webhook_endpoint.resume"]
    assert operator_client.post("/paused/endpoints/999999/pause/").status_code == 404


def test_the_overview_names_what_is_paused_with_its_backlog(operator_client):
    assert 'data-role="paused-line"' not in operator_client.get("/").content.decode()
    host_message("m1")
    pauses.pause("host", "api.example.com", actor="otto")
    webhook_event("evt_1", "received")
    WebhookEndpoint.objects.update(paused=True)
    WebhookEvent.objects.update(status="held")
    html = operator_client.get("/").content.decode()
    assert html.count('data-role="paused-line"') == 1
    assert "destination host <code>api.example.com</code></a> (1 waiting, oldest" in html
    assert "endpoint <code>stripe</code></a> (1 held, oldest" in html


def test_the_outbox_and_events_pages_load_their_part_of_the_panel(operator_client):
    outbox = operator_client.get("/outbox/").content.decode()
    events = operator_client.get("/events/").content.decode()
    assert 'hx-get="/paused/?show=outbox"' in outbox and 'href="/paused/"' in outbox
    assert 'hx-get="/paused/?show=endpoints"' in events
    part = operator_client.get("/paused/?show=outbox", headers=HTMX).content.decode()
    assert "Outbox: paused sending" in part and "Webhook endpoints" not in part


def test_pausing_an_unknown_action_is_refused_with_the_ones_there_are(operator_client):
    response = operator_client.post("/paused/outbox/pause/", {"kind": "action", "target": "http.psot"}, headers=HTMX)
    assert response.status_code == 400
    html = response.content.decode()
    assert "Not paused: http.psot is not a registered action. These are: " in html and "http.post" in html
    assert not OutboxPause.objects.exists()
