"""Pausing in a real browser: an operator pauses a destination host from the outbox page,
its messages stay (a real drain sends nothing of them) while the panel shows the backlog and
its age; resuming drains it, and the panel, which refreshes itself, shows it gone without a
reload. And the send-again confirmation warns that a permanent 403 will not go away.

Screenshots (1440x900) go to var/screenshots/pause-*.png for a human to look at.
"""

from __future__ import annotations

import pytest
from django.db import connections

from receipts.outbox import drain, store
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import outbox_message, webhook_event
from tests.dashboard.test_browser import SHOTS, browser  # noqa: F401 (the Chromium fixture)
from tests.dashboard.test_browser_repair import _in_a_thread, _log_in

from ..receipts.outbox.receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def otto_page(operator, browser, live_server):  # noqa: F811
    return _log_in(browser, live_server, "otto")


def _statuses() -> set[str]:
    try:
        return set(OutboxMessage.objects.values_list("status", flat=True))
    finally:
        connections.close_all()


def test_a_paused_destination_keeps_its_backlog_and_drains_on_resume(otto_page, live_server, settings):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    page = otto_page
    with running_receiver() as receiver:
        page.goto(live_server.url + "/outbox/")
        page.wait_for_selector('[data-role="outbox-pause-form"]')  # the panel, loaded in place
        page.select_option('[data-role="outbox-pause-form"] select[name=kind]', "host")
        page.fill('[data-role="outbox-pause-form"] input[name=target]', "127.0.0.1")
        page.fill('[data-role="outbox-pause-form"] input[name=note]', "receiver answers 503 to everything")
        page.evaluate("window.__stayed = true")
        page.click("text=Pause sending")
        page.wait_for_selector('#pause-panel tr[data-target="127.0.0.1"][data-waiting="0"]')
        assert "Paused sending for destination host 127.0.0.1" in page.inner_text("#pause-panel")

        # Work keeps coming: five messages for the paused host. A real drain sends none.
        for n in range(5):
            store.enqueue("http.post", {"url": receiver.url, "json": {"order": n}}, f"order-{n}")
        connections.close_all()
        _in_a_thread(lambda: drain.drain(max_seconds=2, idle_wait=0.1))
        assert receiver.requests == {} and _statuses() == {"pending"}

        # The panel refreshes itself (every 5 s) to the backlog, with the oldest one's age.
        row = page.wait_for_selector('#pause-panel tr[data-target="127.0.0.1"][data-waiting="5"]', timeout=15_000)
        assert " ago" in row.inner_text() and "otto" in row.inner_text()
        # While an operator types in the panel's form, its refresh waits, so nothing typed is lost.
        page.fill('[data-role="outbox-pause-form"] input[name=target]', "api.example.com")
        page.wait_for_timeout(6_000)
        assert page.input_value('[data-role="outbox-pause-form"] input[name=target]') == "api.example.com"
        page.fill('[data-role="outbox-pause-form"] input[name=target]', "")
        page.select_option("select[name=status]", "pending")
        page.wait_for_selector("#outbox-table >> text=order-4")
        page.screenshot(path=SHOTS / "pause-outbox-paused.png", full_page=True)

        page.click('#pause-panel tr[data-target="127.0.0.1"] >> text=Resume')
        page.wait_for_selector('[data-role="outbox-pauses-none"]')
        assert "Resumed sending for destination host 127.0.0.1" in page.inner_text("#pause-panel")
        # What the worker's drain_backlog task does, here on its own connection.
        _in_a_thread(lambda: drain.drain(max_seconds=5))
        assert _statuses() == {"sent"}
        assert receiver.requests == {f"order-{n}": 1 for n in range(5)}

        # The list, filtered to sent, shows all five without the page having been reloaded.
        page.select_option("select[name=status]", "sent")
        page.wait_for_selector("#outbox-table .badge-sent")
        assert page.locator("#outbox-table .badge-sent").count() == 5
        assert page.evaluate("window.__stayed") is True
        page.screenshot(path=SHOTS / "pause-outbox-resumed.png", full_page=True)

    page.goto(live_server.url + "/")
    assert page.locator('[data-role="paused-line"]').count() == 0  # nothing paused: no line


def test_the_overview_names_a_paused_endpoint_and_the_send_again_confirmation_warns_of_a_403(otto_page, live_server):
    page = otto_page
    dead = outbox_message("invoice-403", "dead", action="http.post")
    OutboxMessage.objects.filter(pk=dead.pk).update(last_status_code=403, last_error="HTTP 403: forbidden")
    webhook_event("evt_waiting_1", "received")
    connections.close_all()
    page.goto(live_server.url + "/events/")
    page.click('#pause-panel tr[data-endpoint="stripe"] >> text=Pause')
    page.wait_for_selector('#pause-panel tr[data-endpoint="stripe"][data-paused="true"][data-held="1"]')
    page.goto(live_server.url + "/")
    assert page.locator('[data-role="paused-line"]').count() == 1
    line = page.inner_text('[data-role="paused-line"]')
    assert "endpoint stripe (1 held, oldest" in line
    page.screenshot(path=SHOTS / "pause-overview-line.png")

    page.goto(live_server.url + f"/outbox/{dead.pk}/")
    page.click("text=Send again…")
    page.wait_for_selector('[data-role="lasting-failure"]')
    text = page.inner_text('[data-role="lasting-failure"]')
    assert "Retrying will not help" in text and "HTTP 403" in text
    page.screenshot(path=SHOTS / "pause-send-again-403.png", full_page=True)


def test_a_long_note_wraps_and_the_resume_button_stays_on_screen(otto_page, live_server, settings):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["partner.example.com"]
    page = otto_page
    page.goto(live_server.url + "/paused/")
    page.wait_for_selector('[data-role="outbox-pause-form"]')
    page.select_option('[data-role="outbox-pause-form"] select[name=kind]', "host")
    page.fill('[data-role="outbox-pause-form"] input[name=target]', "partner.example.com")
    page.fill('[data-role="outbox-pause-form"] input[name=note]', "403" * 166 + "!!")  # 500 characters, no space
    page.click("text=Pause sending")
    row = '#pause-panel tr[data-target="partner.example.com"]'
    page.wait_for_selector(row)
    resume = page.locator(f"{row} button", has_text="Resume").bounding_box()
    width = page.viewport_size["width"]
    page.screenshot(path=str(SHOTS / "pause-long-note.png"), full_page=True)
    assert resume is not None and resume["x"] + resume["width"] <= width, (resume, width)
    # A typo is refused with what could be paused, and the panel says so.
    page.select_option('[data-role="outbox-pause-form"] select[name=kind]', "action")
    page.fill('[data-role="outbox-pause-form"] input[name=target]', "http.psot")
    page.click("text=Pause sending")
    page.wait_for_selector("#pause-panel >> text=http.psot is not a registered action")
    assert "These are: " in page.inner_text("#pause-panel")
