"""The Failures page (idemdash/dashboard/views/failures.py): groups by cause, acknowledged
and resolved by operators, once, audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from idemdash.core import failures
from idemdash.core.failures import Failure, FailureGroup
from idemdash.core.models import AuditEntry
from tests.dashboard.build import outbox_message, webhook_event

pytestmark = pytest.mark.django_db


def failing(n: int = 1, place: str = "shop refunds/create", error: str = "RuntimeError: refund 1042 failed") -> FailureGroup:
    for i in range(n):
        failures.record(Failure("event", place, error), unit_id=i + 1, now=timezone.now())
    return FailureGroup.objects.get(place=place)


def test_the_page_lists_each_group_with_its_count_where_and_latest_error(viewer_client):
    webhook_event("evt_dead_1", "dead")  # failed through processing: its group is recorded there
    outbox_message("partner-1", "dead", action="http.post")
    html = viewer_client.get("/failures/").content.decode()
    assert html.count('data-state="open"') == 2
    assert "RuntimeError: ledger down" in html and "HTTP 400: bad request" in html
    assert "stripe invoice.paid" in html and "http.post 127.0.0.1" in html
    assert "Acknowledge</button>" not in html  # a viewer gets no buttons
    assert 'href="/failures/"' in viewer_client.get("/").content.decode()  # in the navigation


def test_an_operator_acknowledges_then_resolves_a_group_each_once_and_audited(operator_client, operator):
    group = failing(3)
    for _ in range(2):  # the second click changes nothing and says so
        response = operator_client.post(f"/failures/{group.pk}/acknowledge/", follow=True)
    assert "Nothing done: It is acknowledged already." in response.content.decode()
    operator_client.post(f"/failures/{group.pk}/resolve/")
    group.refresh_from_db()
    assert (group.state, group.state_by) == ("resolved", "otto")
    assert list(AuditEntry.objects.values_list("action", "user")) == [
        ("failure_group.acknowledge", operator.pk), ("failure_group.resolve", operator.pk)]
    html = operator_client.get("/failures/?state=resolved").content.decode()
    assert "by otto" in html and 'data-state="resolved"' in html
    assert "Nothing is failing" in operator_client.get("/failures/").content.decode()


def test_a_resolved_group_that_fails_again_is_open_again_on_the_page(operator_client):
    group = failing()
    operator_client.post(f"/failures/{group.pk}/resolve/")
    failing()
    assert 'data-state="open"' in operator_client.get("/failures/").content.decode()


def test_viewers_may_not_act_outsiders_see_nothing_and_a_post_needs_its_csrf_token(viewer_client, outsider_client, client,
                                                                                    operator):
    group = failing()
    for action in ("acknowledge", "resolve"):
        assert viewer_client.post(f"/failures/{group.pk}/{action}/").status_code == 403
        assert client.post(f"/failures/{group.pk}/{action}/")["Location"].startswith("/accounts/login/")
    assert outsider_client.get("/failures/").status_code == 403
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(f"/failures/{group.pk}/acknowledge/").status_code == 403
    assert viewer_client.get(f"/failures/{group.pk}/acknowledge/").status_code == 405
    assert FailureGroup.objects.get().state == "open" and not AuditEntry.objects.exists()


def test_an_unknown_group_is_404_and_an_unknown_state_filter_shows_the_unresolved(operator_client):
    assert operator_client.post("/failures/999/resolve/").status_code == 404
    failing()
    assert 'data-state="open"' in operator_client.get("/failures/?state=nonsense").content.decode()


@pytest.mark.parametrize("error", [
    "RuntimeError: " + "x" * 10_000,
    "RuntimeError: \x00NUL and \u202eevil\u202c <script>alert(1)</script>",
    "RuntimeError: partner said \udcff\udcfe",
])
def test_hostile_error_text_is_grouped_and_shown_neutralised(viewer_client, error):
    failing(error=error)
    response = viewer_client.get("/failures/")
    html = response.content.decode(errors="replace")
    assert response.status_code == 200 and "<script>alert" not in html and "\u202e" not in html


def test_the_list_says_how_many_there_are_past_its_limit(viewer_client, monkeypatch):
    from idemdash.dashboard.views import failures as view

    monkeypatch.setattr(view, "LIMIT", 2)
    for place in ("a x", "b x", "c x"):
        failing(place=place)
    assert "Showing the 2 most recent of 3." in viewer_client.get("/failures/").content.decode()


def test_a_quiet_group_shows_as_resolved_by_itself(viewer_client):
    failures.record(Failure("event", "stripe invoice.paid", "KeyError: 'amount'"), unit_id=1,
                    now=timezone.now() - failures.QUIET - timedelta(minutes=1))
    failures.resolve_quiet(timezone.now())
    assert "by itself" in viewer_client.get("/failures/?state=resolved").content.decode()


def test_a_group_links_to_its_failing_units_and_its_dead_ones_are_repaired_from_the_bulk_preview(operator_client, settings):
    from webhooks.models import WebhookEvent

    from tests.dashboard.build import confirm_bulk

    for n in range(3):
        webhook_event(f"evt_bug_{n}", "dead", event_type="refunds/create")
    webhook_event("evt_other", "dead", event_type="orders/create")  # the same bug at another place
    group = FailureGroup.objects.get(place="stripe refunds/create")
    html = operator_client.get("/failures/").content.decode()
    row = html.split(f'data-group="{group.signature}"')[1].split("</tr>")[0]
    assert f'href="/events/?group={group.signature}&amp;status=dead">3 dead</a>' in row

    listed = operator_client.get(f"/events/?group={group.signature}&status=dead").content.decode()
    assert listed.count('href="/events/') >= 3 and "evt_other" not in listed and 'data-role="group-filter"' in listed
    assert 'data-count="3"' in operator_client.get(f"/events/bulk-reprocess/?group={group.signature}").content.decode()
    run, _ = confirm_bulk(operator_client, "/events/bulk-reprocess/", {"group": group.signature, "status": "dead"})
    assert run.status == "finished"
    assert sorted(WebhookEvent.objects.values_list("provider_event_id", "status")) == [
        ("evt_bug_0", "received"), ("evt_bug_1", "received"), ("evt_bug_2", "received"), ("evt_other", "dead")]


def test_a_malformed_group_filter_is_a_clear_400(viewer_client):
    response = viewer_client.get("/events/?group=not-a-group")
    assert response.status_code == 400 and "A failure group is 32 hex digits." in response.content.decode()
