"""The alert rules pages: viewers see, operators create, edit, delete and evaluate (audited)."""

from __future__ import annotations

import pytest
from django.test import Client

from idemdash.dashboard.models import Alert, AlertRule
from idemdash.core.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import stuck

pytestmark = pytest.mark.django_db

VALID = {"name": "stuck rows", "metric": "stuck_rows", "comparison": ">", "threshold": "0", "window": "1h",
         "channel": "email", "target": "ops@example.com", "enabled": "on"}


def make_rule(**kw) -> AlertRule:
    fields = {"name": "stuck rows", "metric": "stuck_rows", "threshold": 0, "window_minutes": 60,
              "channel": "email", "target": "ops@example.com", **kw}
    return AlertRule.objects.create(**fields)


def test_a_viewer_sees_the_rules_and_their_state_but_no_buttons(viewer_client):
    make_rule()
    make_rule(name="quiet", metric="dead_outbox_messages", enabled=False)
    html = viewer_client.get("/alerts/rules/").content.decode()
    assert "Stuck rows (receipts, webhook events, outbox messages) &gt; 0 now" in html
    assert "Dead outbox messages &gt; 0 over 1h" in html
    assert "disabled" in html
    assert "Evaluate now" not in html and "New rule" not in html and "Delete…" not in html


def test_an_operator_creates_a_rule_and_it_is_audited(operator_client, operator):
    response = operator_client.post("/alerts/rules/new/", {**VALID, "window": "15m"})
    assert response.status_code == 302 and response["Location"] == "/alerts/rules/"
    rule = AlertRule.objects.get()
    assert (rule.metric, rule.window_minutes, rule.created_by, rule.enabled) == ("stuck_rows", 15, operator, True)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.object_type, entry.object_id, entry.user) == (
        "alert_rule.create", "otto", "idemdash_dashboard.alertrule", str(rule.pk), operator)
    assert "ops@example.com" in entry.detail
    assert "created" in operator_client.get("/alerts/rules/").content.decode()


@pytest.mark.parametrize("change,field,message", [
    ({"target": "not-an-address"}, "target", "Enter a valid email address."),
    ({"channel": "webhook", "target": "ftp://example.com/x"}, "target", "Give an http or https URL."),
    ({"window": "90d"}, "window", "between 1 minute and 30 days"),
    ({"window": "soon"}, "window", "Give a window such as"),
    ({"metric": "duplicate_rate", "threshold": "100"}, "threshold", "20 means 20%"),
    ({"threshold": "-1"}, "threshold", "0 or more"),
    ({"metric": "cpu"}, "metric", "Select a valid choice"),
    ({"name": ""}, "name", "This field is required."),
])
def test_bad_input_is_shown_inline_and_nothing_is_saved(operator_client, change, field, message):
    response = operator_client.post("/alerts/rules/new/", {**VALID, **change})
    html = response.content.decode()
    assert response.status_code == 400
    assert f'id="id_{field}-error"' in html and message in html
    assert not AlertRule.objects.exists() and not AuditEntry.objects.exists()


def test_a_webhook_host_outside_the_outbox_allow_list_is_refused(operator_client, settings):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["hooks.slack.com"]
    response = operator_client.post("/alerts/rules/new/", {**VALID, "channel": "webhook",
                                                           "target": "http://169.254.169.254/latest"})
    assert response.status_code == 400 and "OUTBOX_HTTP_ALLOWED_HOSTS" in response.content.decode()
    ok = operator_client.post("/alerts/rules/new/", {**VALID, "channel": "webhook",
                                                     "target": "https://hooks.slack.com/services/T/B/X"})
    assert ok.status_code == 302


def test_a_duplicate_name_is_refused_inline(operator_client):
    make_rule()
    response = operator_client.post("/alerts/rules/new/", VALID)
    assert response.status_code == 400 and "already exists" in response.content.decode()


def test_an_operator_edits_a_rule_and_the_form_shows_its_window_by_name(operator_client, operator):
    rule = make_rule(window_minutes=1440)
    html = operator_client.get(f"/alerts/rules/{rule.pk}/").content.decode()
    assert 'name="window" value="24h"' in html and 'name="csrfmiddlewaretoken"' in html
    response = operator_client.post(f"/alerts/rules/{rule.pk}/", {**VALID, "threshold": "5", "enabled": ""})
    assert response.status_code == 302
    rule.refresh_from_db()
    assert (rule.threshold, rule.enabled, rule.window_minutes) == (5, False, 60)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after) == ("alert_rule.update", "enabled", "disabled")


def test_deleting_asks_first_then_resolves_the_firing_alert_and_keeps_the_history(operator_client):
    rule = make_rule()
    stuck("r1")
    operator_client.post(f"/alerts/rules/{rule.pk}/evaluate/")
    html = operator_client.get(f"/alerts/rules/{rule.pk}/delete/").content.decode()
    assert "Confirm delete" in html and "It is firing now" in html
    assert AlertRule.objects.exists()  # a GET changes nothing
    response = operator_client.post(f"/alerts/rules/{rule.pk}/delete/")
    assert response.status_code == 302 and not AlertRule.objects.exists()
    alert = Alert.objects.get()
    assert (alert.state, alert.rule_name) == ("resolved", "stuck rows")
    assert AuditEntry.objects.filter(action="alert_rule.delete", object_id=str(rule.pk)).exists()
    assert "(deleted)" in operator_client.get("/alerts/").content.decode()


def test_evaluate_now_fires_the_rule_tells_the_operator_and_is_audited(operator_client):
    rule = make_rule()
    stuck("r1")
    response = operator_client.post(f"/alerts/rules/{rule.pk}/evaluate/", follow=True)
    html = response.content.decode()
    assert "stuck rows fired: the figure is 1" in html
    alert = Alert.objects.get()
    assert alert.state == "firing" and OutboxMessage.objects.get().key == alert.fired_notification_key
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.status_before, entry.status_after, entry.detail) == (
        "alert_rule.evaluate", "ok", "firing", "value 1")
    again = operator_client.post(f"/alerts/rules/{rule.pk}/evaluate/", follow=True).content.decode()
    assert "still firing" in again and OutboxMessage.objects.count() == 1


@pytest.mark.parametrize("method,path", [
    ("post", "/alerts/rules/new/"), ("get", "/alerts/rules/new/"),
    ("post", "/alerts/rules/{pk}/"), ("get", "/alerts/rules/{pk}/"),
    ("post", "/alerts/rules/{pk}/delete/"), ("get", "/alerts/rules/{pk}/delete/"),
    ("post", "/alerts/rules/{pk}/evaluate/"),
])
def test_a_viewer_may_not_act_403_and_nothing_changes(viewer_client, method, path):
    rule = make_rule()
    stuck("r1")
    response = getattr(viewer_client, method)(path.format(pk=rule.pk), {**VALID, "name": "changed"})
    assert response.status_code == 403
    assert AlertRule.objects.get().name == "stuck rows" and AlertRule.objects.count() == 1
    assert not Alert.objects.exists() and not AuditEntry.objects.exists()


def test_evaluate_now_is_post_only(operator_client):
    rule = make_rule()
    assert operator_client.get(f"/alerts/rules/{rule.pk}/evaluate/").status_code == 405


@pytest.mark.parametrize("path", ["/alerts/rules/new/", "/alerts/rules/{pk}/", "/alerts/rules/{pk}/delete/",
                                  "/alerts/rules/{pk}/evaluate/"])
def test_posts_without_the_csrf_token_are_refused(operator, path):
    rule = make_rule()
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post(path.format(pk=rule.pk), VALID).status_code == 403
    assert AlertRule.objects.count() == 1 and not AuditEntry.objects.exists()


def test_anonymous_users_go_to_the_login_page_and_outsiders_get_403(client, outsider_client):
    rule = make_rule()
    for path in ("/alerts/rules/", f"/alerts/rules/{rule.pk}/", "/alerts/"):
        assert client.get(path)["Location"].startswith("/accounts/login/")
        assert outsider_client.get(path).status_code == 403
    assert client.post(f"/alerts/rules/{rule.pk}/evaluate/")["Location"].startswith("/accounts/login/")


def test_an_unknown_rule_is_404(operator_client):
    assert operator_client.get("/alerts/rules/999/").status_code == 404
    assert operator_client.post("/alerts/rules/999/delete/").status_code == 404


def test_a_webhook_url_is_masked_on_the_page_and_in_the_audit_log(operator_client, viewer_client):
    url = "https://hooks.slack.com/services/T000/B000/SECRETxyz9"
    operator_client.post("/alerts/rules/new/", {**VALID, "channel": "webhook", "target": url})
    html = viewer_client.get("/alerts/rules/").content.decode()
    assert "https://hooks.slack.com/…xyz9" in html and "SECRET" not in html
    assert "SECRET" not in AuditEntry.objects.get().detail
    assert "SECRET" not in viewer_client.get("/audit/").content.decode()


def test_a_duplicate_rate_rule_is_typed_and_shown_in_percent(operator_client):
    response = operator_client.post("/alerts/rules/new/", {**VALID, "metric": "duplicate_rate", "threshold": "20"})
    assert response.status_code == 302
    assert AlertRule.objects.get().threshold == 20
    html = operator_client.get("/alerts/rules/").content.decode()
    assert "Duplicate rate &gt; 20% over 1h" in html
    form = operator_client.get(f"/alerts/rules/{AlertRule.objects.get().pk}/").content.decode()
    assert 'name="threshold" value="20.0"' in form or 'name="threshold" value="20"' in form


def test_the_form_offers_unprotected_duplicates_and_a_rule_on_them_reads_as_a_count(operator_client):
    form = operator_client.get("/alerts/rules/new/").content.decode()
    assert '<option value="unprotected_duplicates">Would-be duplicates on unprotected routes</option>' in form
    response = operator_client.post("/alerts/rules/new/", {**VALID, "metric": "unprotected_duplicates", "window": "24h"})
    assert response.status_code == 302
    html = operator_client.get("/alerts/rules/").content.decode()
    assert "Would-be duplicates on unprotected routes &gt; 0 over 24h" in html


# --- mail that is not delivered ---------------------------------------------------------------


@pytest.fixture
def smtp(settings):
    """Mail that is sent: an SMTP mailer, as EMAIL_URL makes one (MAILERS on Django 6.1)."""
    backend = "django.core.mail.backends.smtp.EmailBackend"
    if hasattr(settings, "MAILERS"):
        settings.MAILERS = {"default": {"BACKEND": backend}}
    else:
        settings.EMAIL_BACKEND = backend


def test_the_rules_say_when_an_email_rule_would_notify_nobody(viewer_client):
    make_rule(channel="webhook", target="https://hooks.example.com/x")
    assert "data-undelivered-mail" not in viewer_client.get("/alerts/rules/").content.decode()  # no email rule
    make_rule(name="by email")
    html = viewer_client.get("/alerts/rules/").content.decode()
    # Django's test mail stays in memory: a development backend, as console: is by default.
    assert "Mail on this server is kept in memory, not sent: the email rules below notify nobody" in html


def test_the_rule_form_says_it_too(operator_client):
    assert "a rule that notifies by email would notify nobody" in operator_client.get("/alerts/rules/new/").content.decode()


def test_with_mail_that_is_sent_neither_says_anything(viewer_client, operator_client, smtp):
    make_rule()
    assert "data-undelivered-mail" not in viewer_client.get("/alerts/rules/").content.decode()
    assert "data-undelivered-mail" not in operator_client.get("/alerts/rules/new/").content.decode()
