"""Alerts in a real browser: an operator creates a rule, the condition starts to hold, the
scheduled evaluation fires it, and the overview's polling shows it without a reload.

Screenshots go to var/screenshots/alert-*.png."""

from __future__ import annotations

import pytest

from idemdash.dashboard import alerts
from idemdash.dashboard.models import Alert, AlertRule
from tests.dashboard.build import stuck
from tests.dashboard.test_browser import SHOTS, browser, next_poll, operator, operator_page, read_in_place  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def fill_rule(page, name: str, metric: str, threshold: str, window: str, target: str) -> None:
    """Fill the new-rule form (email channel) and submit it."""
    page.fill("input[name=name]", name)
    page.select_option("select[name=metric]", metric)
    page.fill("input[name=threshold]", threshold)
    page.fill("input[name=window]", window)
    page.select_option("select[name=channel]", "email")
    page.fill("input[name=target]", target)
    page.click("text=Create rule")


def test_an_operator_creates_a_rule_and_sees_it_fire_on_the_overview(operator_page, live_server):
    page = operator_page

    # Create the rule; a bad address is shown inline first.
    page.goto(live_server.url + "/alerts/rules/")
    page.click("text=New rule")
    fill_rule(page, "Stuck rows", "stuck_rows", "0", "15m", "ops at example")
    page.wait_for_selector("#id_target-error")
    assert "valid email address" in page.inner_text("#id_target-error")
    page.screenshot(path=SHOTS / "alert-rule-invalid.png", full_page=True)
    page.fill("input[name=target]", "ops@example.com")
    page.click("text=Create rule")
    page.wait_for_url("**/alerts/rules/")
    assert "Stuck rows" in page.inner_text("table.data") and "ok" in page.inner_text("table.data")

    # The overview, quiet; then a worker dies holding a key, and the schedule evaluates.
    page.clock.install()
    page.goto(live_server.url + "/?window=1h")
    assert page.locator(".alert-panel").count() == 0
    read_in_place(lambda: stuck("order-stuck"))
    result = read_in_place(alerts.evaluate)
    assert len(result.fired) == 1
    # The 15 s poll brings the alert in, without a reload.
    page.evaluate("window.__stayed = true")
    next_poll(page)
    page.wait_for_selector(".alert-panel [role=alert]")
    assert "1 ALERT FIRING" in page.inner_text(".alert-panel").upper()
    assert "Stuck rows" in page.inner_text(".alert-panel")
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "alert-overview-firing.png", full_page=True)

    # Evaluate now from the rules page: still firing, no second alert.
    page.goto(live_server.url + "/alerts/rules/")
    page.click("text=Evaluate now")
    page.wait_for_selector(".messages .alert-warning")
    assert "still firing" in page.inner_text(".messages")
    # The test's mail stays in memory (Django's test mail): the page says the email rule notifies nobody.
    assert "Mail on this server is kept in memory, not sent" in page.inner_text("[data-undelivered-mail]")
    page.screenshot(path=SHOTS / "alert-rules.png", full_page=True)

    page.goto(live_server.url + "/alerts/")
    assert page.locator('tr[data-state="firing"]').count() == 1
    page.screenshot(path=SHOTS / "alert-history.png", full_page=True)
    assert read_in_place(lambda: (Alert.objects.count(), AlertRule.objects.get().window_minutes)) == (1, 15)


def test_a_duplicate_rate_rule_reads_in_percent_and_its_alert_says_how_long_and_how_it_notified(
    operator_page, live_server, settings
):
    from datetime import timedelta

    import time_machine
    from django.utils import timezone

    from tests.dashboard.build import completed, mismatched

    page = operator_page
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(live_server.url + "/alerts/rules/new/")
    assert "percentage" in page.inner_text("form.rule-form")
    fill_rule(page, "Duplicates", "duplicate_rate", "20", "1h", "ops@example.com")
    page.wait_for_url("**/alerts/rules/")
    assert "Duplicate rate > 20% over 1h" in page.inner_text("table.data")

    # 5 minutes ago, 1 of 3 requests did not run (33.33%); the rule fired 3 minutes ago.
    def traffic() -> None:
        now = timezone.now()
        with time_machine.travel(now - timedelta(minutes=5), tick=False):
            completed("order-1")
            mismatched("order-422", {"amount": 500}, {"amount": 900})
        alerts.evaluate(now - timedelta(minutes=3))
    read_in_place(traffic)
    page.goto(live_server.url + "/")
    banner = page.inner_text(".alert-panel")
    assert "Duplicate rate > 20% over 1h" in banner and "was 33.33%" in banner, banner
    assert "firing for 3 min" in banner
    page.screenshot(path=SHOTS / "alert-overview-percent.png")
    tile = page.inner_text('[data-figure="receipts.duplicate_rate"] .tile-value')
    assert tile == "33.33%"

    page.goto(live_server.url + "/alerts/")
    notified = page.inner_text('[data-notification="fired"]')
    assert "Email to ops@example.com · queued" in notified and "UTC" in notified
    assert "idemdash:alert:" not in page.content()
    page.screenshot(path=SHOTS / "alert-history-1440.png")
    page.goto(live_server.url + "/alerts/rules/")
    page.screenshot(path=SHOTS / "alert-rules-1440.png")


def test_the_alert_history_brings_a_new_alert_in_by_itself_keeping_its_filters(operator_page, live_server):
    """The history polls like the other lists: filtered to one rule's firing alerts, it shows
    the alert that fires while it is open, and not another rule's, without a reload."""
    page = operator_page
    watched = read_in_place(lambda: AlertRule.objects.create(
        name="Stuck rows", metric="stuck_rows", threshold=0, window_minutes=60, channel="email", target="ops@example.com"))
    read_in_place(lambda: AlertRule.objects.create(
        name="Also stuck", metric="stuck_rows", threshold=0, window_minutes=60, channel="email", target="ops@example.com"))
    page.clock.install()
    page.goto(f"{live_server.url}/alerts/?rule={watched.pk}&state=firing")
    assert page.locator("tr[data-alert]").count() == 0
    page.evaluate("window.__stayed = true")

    read_in_place(lambda: stuck("order-stuck-history"))
    assert len(read_in_place(alerts.evaluate).fired) == 2  # both rules fire; the filter shows one
    next_poll(page)
    page.wait_for_selector('tr[data-state="firing"]')
    assert page.locator("tr[data-alert]").count() == 1
    assert "Stuck rows" in page.inner_text("#alert-table") and "Also stuck" not in page.inner_text("#alert-table")
    assert page.evaluate("window.__stayed") is True
    assert page.locator("select[name=state]").input_value() == "firing"
    page.screenshot(path=SHOTS / "alert-history-refreshed.png", full_page=True)
