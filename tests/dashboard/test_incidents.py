"""Incident pages (idemdash/dashboard/views/incidents.py): the list, one incident with its
history, acknowledging (POST, CSRF, operators only, idempotent, audited once), and the
overview banner's links to the cause and the incident."""

from __future__ import annotations

import pytest
from django.test import Client

from idemdash.dashboard import alerts
from idemdash.dashboard.models import AlertRule, Incident
from receipts import store
from idemdash.core.models import AuditEntry
from receipts.models import Receipt
from tests.dashboard.build import stuck

pytestmark = pytest.mark.django_db


def firing(name: str = "stuck rows") -> Incident:
    AlertRule.objects.create(name=name, metric="stuck_rows", threshold=0, window_minutes=60,
                             channel="email", target="ops@example.com")
    stuck(f"{name}-r")
    alerts.evaluate()
    return Incident.objects.get(alert__rule_name=name)


def ack_url(incident: Incident) -> str:
    return f"/incidents/{incident.pk}/acknowledge/"


def test_the_list_shows_incidents_newest_first_with_their_state(viewer_client):
    first, second = firing("first"), firing("second")
    page = viewer_client.get("/incidents/")
    assert page.status_code == 200
    body = page.content.decode()
    assert body.index(f'data-incident="{second.pk}"') < body.index(f'data-incident="{first.pk}"')
    assert 'data-incident-state="firing"' in body


def test_the_list_filters_by_state_and_refuses_a_bad_state_with_400(viewer_client):
    firing("a")
    incident = firing("b")
    incident.state = "resolved"
    incident.save()
    body = viewer_client.get("/incidents/?state=resolved").content.decode()
    assert f'data-incident="{incident.pk}"' in body and body.count("data-incident=") == 1
    assert viewer_client.get("/incidents/?state=nonsense").status_code == 400


def test_the_list_refreshes_its_table_in_place_with_its_filters(viewer_client):
    """Like the other lists (partials/list_poll.html): every 15 s, with the state it was
    filtered by; the poll brings an incident opened since, and an older page holds still."""
    html = viewer_client.get("/incidents/?state=firing").content.decode()
    tag = html.split('<section id="incident-table"')[1].split(">")[0]
    assert 'hx-get="/incidents/?state=firing" hx-trigger="every 15s" hx-swap="outerHTML"' in tag
    assert "data-incident=" not in html

    incident = firing("while it was open")
    fragment = viewer_client.get("/incidents/?state=firing", headers={"HX-Request": "true"}).content.decode()
    assert fragment.count("data-incident=") == 1 and f'data-incident="{incident.pk}"' in fragment
    assert 'hx-trigger="every 15s"' in fragment.split('<section id="incident-table"')[1].split(">")[0]

    older = viewer_client.get(f"/incidents/?before={incident.pk + 1}").content.decode()
    assert "hx-trigger" not in older.split('<section id="incident-table"')[1].split(">")[0]


def test_the_detail_shows_the_history_and_links_to_the_cause(viewer_client):
    incident = firing()
    page = viewer_client.get(f"/incidents/{incident.pk}/")
    body = page.content.decode()
    assert page.status_code == 200
    assert 'data-event="fired"' in body
    assert 'href="/stuck/" data-link="cause"' in body
    # A viewer sees no acknowledge form.
    assert ack_url(incident) not in body


def test_an_operator_acknowledges_with_a_note_once_however_often_posted(operator_client):
    incident = firing()
    assert ack_url(incident) in operator_client.get(f"/incidents/{incident.pk}/").content.decode()
    first = operator_client.post(ack_url(incident), {"note": "restarting the worker"}, follow=True)
    assert first.status_code == 200
    assert "Acknowledged" in first.content.decode()
    again = operator_client.post(ack_url(incident), {"note": "again"}, follow=True)
    assert "Already acknowledged by otto" in again.content.decode()
    incident.refresh_from_db()
    assert (incident.state, incident.acknowledged_by, incident.note) == ("acknowledged", "otto", "restarting the worker")
    assert AuditEntry.objects.filter(action="incident.acknowledge").count() == 1
    body = again.content.decode()
    assert 'data-event="acknowledged"' in body and "restarting the worker" in body


def test_acknowledging_a_resolved_incident_changes_nothing_and_says_so(operator_client):
    incident = firing()
    store.release(Receipt.objects.get(key="stuck rows-r"), actor="otto")
    alerts.evaluate()
    page = operator_client.post(ack_url(incident), {"note": "late"}, follow=True)
    assert "resolved before your acknowledgement" in page.content.decode()
    assert not AuditEntry.objects.filter(action="incident.acknowledge").exists()


def test_viewers_get_403_and_nothing_changes(viewer_client):
    incident = firing()
    assert viewer_client.post(ack_url(incident), {"note": "x"}).status_code == 403
    assert Incident.objects.get().state == "firing"


def test_acknowledging_is_post_only(operator_client):
    incident = firing()
    assert operator_client.get(ack_url(incident)).status_code == 405


def test_acknowledging_without_the_csrf_token_is_refused(operator):
    incident = firing()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post(ack_url(incident), {"note": "x"}).status_code == 403
    assert Incident.objects.get().state == "firing"


def test_a_note_too_long_is_a_400_that_says_so_and_changes_nothing(operator_client):
    incident = firing()
    page = operator_client.post(ack_url(incident), {"note": "x" * 2001})
    assert page.status_code == 400
    assert 'data-field="note"' in page.content.decode()
    assert Incident.objects.get().state == "firing"
    assert not AuditEntry.objects.exists()


def test_an_unknown_incident_is_404(operator_client):
    assert operator_client.get("/incidents/999/").status_code == 404
    assert operator_client.post("/incidents/999/acknowledge/").status_code == 404


def test_the_banner_links_each_firing_alert_to_its_cause_and_its_incident(operator_client):
    incident = firing()
    body = operator_client.get("/?window=1h").content.decode()
    assert 'href="/stuck/" data-link="cause"' in body
    assert f'href="/incidents/{incident.pk}/" data-link="incident"' in body
    operator_client.post(ack_url(incident), {"note": "mine"})
    assert "acknowledged by" in operator_client.get("/?window=1h").content.decode()


def test_the_audit_log_names_the_acknowledged_incident_and_links_to_it(operator_client):
    incident = firing("stuck rows")
    operator_client.post(ack_url(incident), {"note": "mine"})
    body = operator_client.get("/audit/").content.decode()
    assert "Acknowledge incident" in body
    assert f'href="/incidents/{incident.pk}/"' in body and f"#{incident.pk} stuck rows" in body
