"""Alert history and the overview's alert panel."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from idemdash.core.models import AuditEntry
from idemdash.dashboard import alerts
from idemdash.dashboard.models import Alert, AlertRule
from receipts import store
from tests.dashboard.build import outbox_message, stuck, webhook_event

pytestmark = pytest.mark.django_db


def make_rule(name: str = "stuck rows", **kw) -> AlertRule:
    fields = {"metric": "stuck_rows", "threshold": 0, "window_minutes": 60, "channel": "email",
              "target": "ops@example.com", **kw}
    return AlertRule.objects.create(name=name, **fields)


def fired_then_resolved(rule: AlertRule) -> None:
    receipt = stuck(f"{rule.name}-r")
    alerts.evaluate(rules=[rule])
    store.release(receipt, actor="otto")
    alerts.evaluate(rules=[rule])


def one_resolved_one_firing(resolved: str, firing: str) -> tuple[AlertRule, AlertRule]:
    """Two rules: the first fired and resolved, then the second fired and still firing."""
    first, second = make_rule(resolved), make_rule(firing)
    fired_then_resolved(first)
    stuck(f"r-{firing}")
    alerts.evaluate(rules=[second])
    return first, second


def test_the_history_lists_firing_and_resolved_alerts_newest_first(viewer_client):
    one_resolved_one_firing("old", "new")
    html = viewer_client.get("/alerts/").content.decode()
    assert html.index('data-state="firing"') < html.index('data-state="resolved"')
    assert "condition cleared" in html and "Email to ops@example.com" in html


def test_the_history_filters_by_rule_and_state(viewer_client):
    a, _ = one_resolved_one_firing("a", "b")
    firing = viewer_client.get("/alerts/?state=firing").content.decode()
    assert firing.count("data-alert=") == 1 and 'data-state="firing"' in firing
    only_a = viewer_client.get(f"/alerts/?rule={a.pk}").content.decode()
    assert only_a.count("data-alert=") == 1 and 'data-state="resolved"' in only_a


def test_a_bad_filter_is_a_400_that_names_it(viewer_client):
    response = viewer_client.get("/alerts/?state=exploded")
    assert response.status_code == 400 and "state" in response.content.decode()
    assert viewer_client.get("/alerts/?rule=999").status_code == 400


def test_with_htmx_the_history_table_alone_is_returned(viewer_client):
    html = viewer_client.get("/alerts/?state=firing", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<section id="alert-table"') and "<html" not in html


def test_the_history_pages_by_id(viewer_client):
    rule = make_rule()
    now = timezone.now()
    Alert.objects.bulk_create(Alert(rule=rule, rule_name="stuck rows", metric="stuck_rows", condition="c",
                                    state="resolved", value=1, fired_at=now - timedelta(minutes=i)) for i in range(55))
    first = viewer_client.get("/alerts/").content.decode()
    assert first.count("data-alert=") == 50 and "Older »" in first
    last_shown = Alert.objects.order_by("-id")[49].pk
    second = viewer_client.get(f"/alerts/?before={last_shown}").content.decode()
    assert second.count("data-alert=") == 5 and "« Newest" in second


def test_the_overview_shows_firing_alerts_and_the_polled_fragment_carries_them(viewer_client):
    make_rule()
    stuck("r1")
    alerts.evaluate()
    html = viewer_client.get("/").content.decode()
    assert "1 alert firing" in html and 'data-firing="1"' in html
    fragment = viewer_client.get("/?window=1h", headers={"HX-Request": "true"}).content.decode()
    assert fragment.lstrip().startswith('<div id="overview-figures"')
    assert "1 alert firing" in fragment and "stuck rows" in fragment


def test_the_overview_shows_alerts_resolved_within_its_window(viewer_client):
    rule = make_rule()
    fired_then_resolved(rule)
    html = viewer_client.get("/?window=1h").content.decode()
    assert "alert firing" not in html
    assert "1 resolved in the last 1h" in html


def test_the_overview_without_alerts_shows_no_panel(viewer_client):
    assert "alert-panel" not in viewer_client.get("/").content.decode()


@pytest.mark.parametrize("ago, text", [(timedelta(seconds=40), "firing for 40 s"), (timedelta(minutes=3, seconds=5), "firing for 3 min"),
                                       (timedelta(hours=2, minutes=4), "firing for 2 h 4 min")])
def test_the_banner_says_how_long_the_alert_has_been_firing(viewer_client, ago, text):
    make_rule()
    stuck("r1", minutes_ago=200)
    # The clock held: under load a second passed between the evaluation and the page ("41 s").
    with time_machine.travel(timezone.now(), tick=False):
        alerts.evaluate(timezone.now() - ago)
        html = viewer_client.get("/").content.decode()
    assert text in html and "0 minutes" not in html
    assert "UTC</time>)" in html and "UTC UTC" not in html  # the banner and the overview name the zone once


def test_the_history_shows_each_notification_by_channel_and_time_not_by_key(viewer_client):
    rule = make_rule()
    fired_then_resolved(rule)
    html = viewer_client.get("/alerts/").content.decode()
    assert "idemdash:alert:" not in html
    assert html.count("Email to ops@example.com · queued") == 2
    assert 'data-notification="fired"' in html and 'data-notification="resolved"' in html
    assert "/outbox/" in html and ">pending</a>" in html


def test_the_history_refreshes_its_table_in_place_with_its_filters(viewer_client):
    """Like the other lists (partials/list_poll.html): every 15 s, with the rule and state it
    was filtered by, and the poll brings an alert that fired since, filtered as before."""
    rule, other = make_rule("stuck rows"), make_rule("other rule")
    url = f"/alerts/?rule={rule.pk}&state=firing"
    html = viewer_client.get(url).content.decode()
    tag = html.split('<section id="alert-table"')[1].split(">")[0]
    assert f'hx-get="/alerts/?rule={rule.pk}&amp;state=firing" hx-trigger="every 15s" hx-swap="outerHTML"' in tag
    assert "data-alert=" not in html

    stuck("refresh-r")
    alerts.evaluate(rules=[rule, other])  # both fire; the filter keeps one
    fragment = viewer_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert fragment.count("data-alert=") == 1 and 'data-state="firing"' in fragment
    assert f'data-alert="{Alert.objects.get(rule=rule).pk}"' in fragment
    assert 'hx-trigger="every 15s"' in fragment.split('<section id="alert-table"')[1].split(">")[0]  # and on it goes


def test_an_older_page_of_the_history_holds_still(viewer_client):
    rule = make_rule()
    now = timezone.now()
    Alert.objects.bulk_create(Alert(rule=rule, rule_name="stuck rows", metric="stuck_rows", condition="c",
                                    state="resolved", value=1, fired_at=now - timedelta(minutes=i)) for i in range(55))
    before = Alert.objects.order_by("-id")[49].pk
    older = viewer_client.get(f"/alerts/?before={before}").content.decode()
    assert "hx-trigger" not in older.split('<section id="alert-table"')[1].split(">")[0]


# --- the rules migrate installs -------------------------------------------------------------


def migrated() -> None:
    """What migrate (and a test's flush) sends when it is done."""
    from django.core.management.sql import emit_post_migrate_signal

    emit_post_migrate_signal(verbosity=0, interactive=False, db="default")


def test_migrate_installs_the_default_rules_once_audited_and_an_operators_edit_or_delete_sticks(settings):
    settings.IDEMDASH_DEFAULT_ALERTS_TO = "ops@example.com"
    migrated()
    rules = {r.name: r for r in AlertRule.objects.all()}
    assert set(rules) == {"Dead webhook events", "Dead outbox messages", "Stuck work", "Failing groups"}
    assert {(r.metric, r.condition, r.channel, r.target) for r in rules.values()} == {
        ("dead_webhook_events", "Dead webhook events > 0 over 1h", "email", "ops@example.com"),
        ("dead_outbox_messages", "Dead outbox messages > 0 over 1h", "email", "ops@example.com"),
        ("stuck_rows", "Stuck rows (receipts, webhook events, outbox messages) > 0 now", "email", "ops@example.com"),
        ("failing_groups", "Failure groups with a dead event or message > 0 over 1h", "email", "ops@example.com"),
    }
    assert AuditEntry.objects.filter(actor="migrate", action="alert_rule.create").count() == 4

    alerts.delete_rule(rules["Stuck work"], actor="otto")
    rules["Dead webhook events"].threshold = 5
    alerts.save_rule(rules["Dead webhook events"], actor="otto")
    migrated()
    assert sorted(AlertRule.objects.values_list("name", "threshold")) == [
        ("Dead outbox messages", 0), ("Dead webhook events", 5), ("Failing groups", 0)]
    assert AuditEntry.objects.filter(actor="migrate").count() == 4


def test_with_no_address_to_send_to_migrate_installs_none():
    migrated()  # tests/settings.py: IDEMDASH_DEFAULT_ALERTS_TO = ""
    assert not AlertRule.objects.exists()


def test_each_fault_a_fresh_install_meets_opens_an_incident_through_a_default_rule(settings):
    settings.IDEMDASH_DEFAULT_ALERTS_TO = "ops@example.com"
    migrated()
    webhook_event("evt_dead_1", "dead")
    outbox_message("partner-403-1", "dead", action="http.post")
    stuck("agent-hung-1", "lead.enrich")
    result = alerts.evaluate()
    firing = Alert.objects.filter(state="firing").select_related("incident")
    assert sorted(a.rule_name for a in firing) == [
        "Dead outbox messages", "Dead webhook events", "Failing groups", "Stuck work"]
    assert all(a.incident.state == "firing" for a in firing) and len(result.fired) == 4
    assert result.values["Failing groups"] == 2  # the handler's and the partner's
