"""Incidents and caller text in a real browser: a RIGHT-TO-LEFT OVERRIDE in a rule name does
not reverse the alert banner, and an operator follows the banner to the incident and
acknowledges it with a note.

Screenshots go to var/screenshots/incident-*.png."""

from __future__ import annotations

import pytest

from idemdash.dashboard import alerts
from idemdash.dashboard.models import AlertRule, Incident
from idemdash.core.models import AuditEntry
from tests.dashboard.build import stuck
from tests.dashboard.test_browser import SHOTS, browser, next_poll, operator, operator_page, read_in_place  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RLO = "\u202e"


def _evil_rule_fires() -> int:
    AlertRule.objects.create(name=f"Payments {RLO}deliaf", metric="stuck_rows", threshold=0, window_minutes=60,
                             channel="email", target="ops@example.com")
    stuck("order-stuck")
    alerts.evaluate()
    return Incident.objects.get().pk


def _reading_place(box: dict) -> tuple[int, float]:
    """Where a box is in left-to-right reading order: its line, then its left edge."""
    return round(box["y"]), box["x"]


def test_a_bidi_override_in_a_rule_name_does_not_reverse_the_banner(operator_page, live_server):
    page = operator_page
    read_in_place(_evil_rule_fires)
    page.goto(live_server.url + "/?window=1h")
    item = page.locator(".alert-panel [data-alert]").first
    item.wait_for()
    page.screenshot(path=SHOTS / "incident-banner-bidi.png", full_page=False)
    text = item.inner_text()
    assert RLO not in text and "Payments [U+202E]deliaf" in text
    assert item.locator("a[data-link=cause]").count() == 1 and item.locator("a[data-link=incident]").count() == 1
    # Laid out in reading order, as written: the figure ("was 1") comes after the name and
    # before the incident's link (which may wrap to the next line).
    name, value = (item.locator("strong").nth(i).bounding_box() for i in (0, 1))
    assert name["y"] == value["y"] and name["x"] + name["width"] < value["x"]
    assert _reading_place(value) < _reading_place(item.locator("a[data-link=incident]").bounding_box())

    # The same line with the override left in reverses: the measure above does see it.
    page.set_content(
        "<ul><li><strong>Payments " + RLO + "deliaf</strong>: Stuck rows &gt; 0 now · was <strong>1</strong>"
        " · firing for 3 min · <a href='#'>see the cause</a> · <a href='#'>incident #1</a></li></ul>"
    )
    page.screenshot(path=SHOTS / "incident-banner-bidi-unneutralised.png", clip={"x": 0, "y": 0, "width": 900, "height": 60})
    value, incident = page.locator("li strong").nth(1).bounding_box(), page.locator("li a").nth(1).bounding_box()
    assert _reading_place(incident) < _reading_place(value)


def test_an_operator_follows_the_banner_to_the_incident_and_acknowledges_it(operator_page, live_server):
    page = operator_page
    pk = read_in_place(_evil_rule_fires)
    page.goto(live_server.url + "/?window=1h")
    page.click(".alert-panel a[data-link=incident]")
    page.wait_for_url(f"**/incidents/{pk}/")
    assert page.inner_text("[data-incident-state]") == "firing"
    page.fill("textarea[name=note]", "Restarting the stuck worker")
    page.screenshot(path=SHOTS / "incident-before-ack.png", full_page=True)
    page.click("#acknowledge button[type=submit]")
    page.wait_for_selector(".messages .alert-success")
    assert "Acknowledged" in page.inner_text(".messages")
    assert page.inner_text("#incident-summary [data-incident-state]") == "acknowledged"
    assert "Restarting the stuck worker" in page.inner_text("#incident-history tr[data-event=acknowledged]")
    assert page.locator("#acknowledge").count() == 0  # nothing left to acknowledge
    page.screenshot(path=SHOTS / "incident-acknowledged.png", full_page=True)

    # The banner says who has it; the cause link leads to the filtered page.
    page.goto(live_server.url + "/?window=1h")
    assert "acknowledged by otto" in page.inner_text(".alert-panel")
    page.click(".alert-panel a[data-link=cause]")
    page.wait_for_url("**/stuck/")
    assert "order-stuck" in page.inner_text("main")

    page.goto(live_server.url + "/incidents/")
    assert page.locator(f'tr[data-incident="{pk}"] [data-incident-state="acknowledged"]').count() == 1
    page.screenshot(path=SHOTS / "incident-list.png", full_page=True)
    assert read_in_place(lambda: AuditEntry.objects.filter(action="incident.acknowledge").count()) == 1


def test_the_incident_list_brings_a_new_incident_in_by_itself_keeping_its_filter(operator_page, live_server):
    """The list polls like the other lists: open on the firing incidents, it shows the one that
    opens while it is open, without a reload and with its filter kept."""
    page = operator_page
    page.clock.install()
    page.goto(f"{live_server.url}/incidents/?state=firing")
    assert page.locator("tr[data-incident]").count() == 0
    page.evaluate("window.__stayed = true")

    pk = read_in_place(_evil_rule_fires)
    next_poll(page)
    page.wait_for_selector(f'tr[data-incident="{pk}"]')
    assert page.locator('tr[data-incident] [data-incident-state="firing"]').count() == 1
    assert page.evaluate("window.__stayed") is True
    assert page.locator("select[name=state]").input_value() == "firing"
    page.screenshot(path=SHOTS / "incident-list-refreshed.png", full_page=True)
