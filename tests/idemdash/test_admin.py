"""Admin for alert rules (audited like the dashboard) and alerts (read-only)."""

from __future__ import annotations

import pytest

from idemdash.dashboard import alerts
from idemdash.dashboard.models import Alert, AlertRule
from idemdash.core.models import AuditEntry
from tests.dashboard.build import stuck

pytestmark = pytest.mark.django_db

FORM = {"name": "stuck", "metric": "stuck_rows", "comparison": ">", "threshold": "0", "window_minutes": "60",
        "channel": "email", "target": "ops@example.com", "enabled": "on"}


def test_adding_a_rule_in_the_admin_is_audited_with_the_admins_username_as_actor(admin_client, admin_user):
    response = admin_client.post("/admin/idemdash_dashboard/alertrule/add/", FORM)
    assert response.status_code == 302
    rule = AlertRule.objects.get()
    assert rule.created_by == admin_user
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.object_id) == ("alert_rule.create", "admin", str(rule.pk))


def test_the_admin_refuses_a_bad_target_like_the_dashboard(admin_client):
    response = admin_client.post("/admin/idemdash_dashboard/alertrule/add/", {**FORM, "channel": "webhook", "target": "nope"})
    assert response.status_code == 200 and "Give an http or https URL." in response.content.decode()
    assert not AlertRule.objects.exists()


def test_deleting_in_the_admin_resolves_the_firing_alert_and_is_audited(admin_client):
    rule = AlertRule.objects.create(name="stuck", metric="stuck_rows", threshold=0, channel="email",
                                    target="ops@example.com")
    stuck("r1")
    alerts.evaluate()
    response = admin_client.post(f"/admin/idemdash_dashboard/alertrule/{rule.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not AlertRule.objects.exists()
    assert Alert.objects.get().state == "resolved"
    assert AuditEntry.objects.get().action == "alert_rule.delete"


def test_the_evaluate_action_fires_and_is_audited(admin_client):
    rule = AlertRule.objects.create(name="stuck", metric="stuck_rows", threshold=0, channel="email",
                                    target="ops@example.com")
    stuck("r1")
    admin_client.post("/admin/idemdash_dashboard/alertrule/", {"action": "evaluate_selected", "_selected_action": [rule.pk]})
    assert Alert.objects.get(rule=rule).state == "firing"
    assert AuditEntry.objects.get().action == "alert_rule.evaluate"


def test_alerts_are_read_only_in_the_admin(admin_client):
    rule = AlertRule.objects.create(name="stuck", metric="stuck_rows", threshold=0, channel="email",
                                    target="ops@example.com")
    stuck("r1")
    alerts.evaluate()
    alert = Alert.objects.get()
    assert admin_client.get("/admin/idemdash_dashboard/alert/").status_code == 200
    assert admin_client.get("/admin/idemdash_dashboard/alert/add/").status_code == 403
    page = admin_client.get(f"/admin/idemdash_dashboard/alert/{alert.pk}/change/").content.decode()
    assert 'name="_save"' not in page and rule.name in page


def test_the_admin_lists_a_rate_threshold_in_percent(admin_client):
    AlertRule.objects.create(name="dups", metric="duplicate_rate", threshold=20, channel="email", target="ops@example.com")
    html = admin_client.get("/admin/idemdash_dashboard/alertrule/").content.decode()
    assert '<td class="field-threshold_shown">20%</td>' in html
