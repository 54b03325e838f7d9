"""The operator's repair loop in a real browser, for each kind of unit: make it fail, find it
from the overview, repair it, and see it complete on the page without a reload; and a
viewer sees the same pages without the actions.

Screenshots (1440x900) go to var/screenshots/repair-*.png for a human to look at.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.request

import pytest
from django.db import connections

from idemdash.core import bulk_runs
from idemdash.core.clients import create_token
from receipts.downstream import downstream_key
from receipts.outbox import drain
from tests.dashboard.build import SCOPE, failed, outbox_message, stuck, webhook_event
from tests.dashboard.test_browser import SHOTS, act_in_place, browser  # noqa: F401 (the Chromium fixture)
from webhooks import handlers, processing

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SIZE = {"width": 1440, "height": 900}
REPAIRED_TYPE = "invoice.repair_test"


def _log_in(browser, live_server, username: str):  # noqa: F811
    page = browser.new_page(viewport=SIZE)
    page.set_default_timeout(15_000)
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", f"pw-{username}")
    page.click("button[type=submit]")
    page.wait_for_url(live_server.url + "/")
    return page


@pytest.fixture
def otto_page(browser, live_server):  # noqa: F811
    """A page logged in as the operator."""
    return _log_in(browser, live_server, "otto")



# Where each broken unit (a key of the `broken` fixture) is found from the overview: its tile
# and the count it shows (None: not checked), the filtered list, the row's link text, the
# detail page's path, the id prefix of its sections there, and the status it is in.
FOUND_FROM = {
    "receipt": ("receipts.failed", "1", "**/receipts/?status=failed*", "order-123", "receipts", "receipt", "failed"),
    "event": ("webhooks.dead", "1", "**/events/?status=dead", "evt_repair_1", "events", "webhookevent", "dead"),
    "message": ("outbox.dead", None, "**/outbox/?status=dead", "mail-dead-1", "outbox", "outboxmessage", "dead"),
}


def _open_from_overview(page, broken, kind: str):
    """From the overview, the unit's tile leads to the filtered list and its row to its detail
    page, which shows its status. Returns the unit."""
    figure, count, list_url, link, path, section, status = FOUND_FROM[kind]
    row = broken[kind]
    if count is not None:
        assert page.inner_text(f'[data-figure="{figure}"] .tile-value') == count
    page.click(f'[data-figure="{figure}"]')
    page.wait_for_url(list_url)
    page.click(f"text={link}")
    page.wait_for_url(f"**/{path}/{row.pk}/")
    assert page.get_attribute(f"#{section}-state [data-status]", "data-status") == status
    return row


def _confirm(page, shot: str, reason_field: str, reason: str, button: str, arrived, shown: str) -> str:
    """Screenshot a confirmation, give the reason and confirm; once `arrived()`, the text of
    `shown`, where the outcome is said."""
    page.screenshot(path=SHOTS / shot)
    page.fill(reason_field, reason)
    page.click(button)
    arrived()
    return page.inner_text(shown)


def _in_a_thread(fn) -> None:
    """Run `fn` as a worker would, on its own connection, while the page stays open."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(30)
    assert not worker.is_alive() and not errors, errors


def _api(live_server, token: str, endpoint: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{live_server.url}/api/v1/receipts/{endpoint}", data=json.dumps(body).encode(), method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture
def broken(operator, viewer):
    """One unit of each kind that needs an operator, made through the domain functions."""
    calls: list[str] = []
    handlers.webhook_handler("stripe", REPAIRED_TYPE)(lambda event: calls.append(event.provider_event_id))
    try:
        yield {
            "receipt": failed("order-123"),
            "token": create_token(SCOPE.removeprefix("client:"))[1],
            "event": webhook_event("evt_repair_1", "dead", event_type=REPAIRED_TYPE),
            "message": outbox_message("mail-dead-1", "dead"),
            "stuck": stuck("order-stuck-9", operation="refund.create"),
            "stuck_event": webhook_event("evt_stuck_1", "processing", event_type="invoice.paid", minutes_ago=30),
            "stuck_message": outbox_message("mail-stuck-1", "in_flight", minutes_ago=10),
            "calls": calls,
        }
    finally:
        handlers.unregister("stripe", REPAIRED_TYPE)


def test_an_operator_releases_a_failed_receipt_and_sees_the_callers_next_attempt_land(broken, otto_page, live_server):
    page = otto_page
    # Find it from the overview: the Failed keys tile (1) leads to the filtered list.
    _open_from_overview(page, broken, "receipt")

    # Release it: the confirmation says what it does; the summary shows what it did at once.
    act_in_place(page, "#receipt-actions >> text=Release…", "card issuer fixed", "Confirm release",
                 '#receipt-state [data-status="released"]',
                 warns="the caller's next attempt with this key runs the operation again")
    summary = page.inner_text("#receipt-summary")
    assert "Released order-123: the caller's next attempt will run." in summary
    assert "Released — next attempt will run" in summary and "by otto" in summary and "card issuer fixed" in summary
    assert "card_declined" in summary  # the original error is kept
    assert "Release…" not in summary
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "repair-receipt-released.png")

    # The caller's next attempt, over HTTP: it appears in the timeline without a reload.
    claim = _api(live_server, broken["token"], "claim",
                 {"key": "order-123", "operation": "payment.create", "request": {"key": "order-123"}})
    assert claim["outcome"] == "retried_after_failure"
    page.wait_for_selector("#receipt-timeline .tl-retried_after_failure")
    _api(live_server, broken["token"], "complete", {"key": "order-123", "token": claim["token"], "response": {"id": "ch_2"}})
    page.wait_for_selector('#receipt-state [data-status="completed"]')
    page.wait_for_selector("#receipt-timeline .tl-completed")
    assert "ch_2" in page.inner_text("#receipt-io")  # the stored response, also without a reload
    assert page.evaluate("window.__stayed") is True
    assert page.get_attribute("#receipt-state", "data-live") == "false"  # polling stopped
    page.screenshot(path=SHOTS / "repair-receipt-detail.png")

    # The tiles agree: nothing failed is left.
    page.goto(live_server.url + "/")
    assert page.inner_text('[data-figure="receipts.failed"] .tile-value') == "0"


def test_an_operator_reprocesses_a_dead_event_and_the_page_shows_the_workers_outcome(broken, otto_page, live_server):
    page = otto_page
    event = _open_from_overview(page, broken, "event")

    act_in_place(page, "text=Reprocess…", "handler fixed", "Confirm reprocess",
                 '#webhookevent-state [data-status="received"]')
    assert "Reprocessing event evt_repair_1: it is received and handed to a worker now." in page.inner_text(
        "#webhookevent-summary")
    assert page.get_attribute("#webhookevent-state", "data-live") == "true"

    # A worker runs it; the page shows the outcome when it lands, without a reload.
    _in_a_thread(lambda: processing.process_event(event.pk))
    assert broken["calls"] == ["evt_repair_1"]
    page.wait_for_selector('#webhookevent-state [data-status="completed"]')
    page.wait_for_selector("#event-attempts .badge-outcome-completed")  # the log too, from the same poll
    assert "The handler ran and committed." in page.inner_text("#webhookevent-state")
    assert page.get_attribute("#webhookevent-state", "data-live") == "false"
    assert "Reprocessing event evt_repair_1" in page.inner_text("#webhookevent-summary")  # the flash stays
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "repair-event-detail.png")


def test_an_operator_sends_a_dead_message_again_and_the_page_shows_it_sent(broken, otto_page, live_server):
    page = otto_page
    _open_from_overview(page, broken, "message")

    act_in_place(page, "text=Send again…", "receiver fixed", "Confirm send again",
                 '#outboxmessage-state [data-status="pending"]')
    assert "Sending message mail-dead-1 again" in page.inner_text("#outboxmessage-summary")
    # The page's "Operator actions" card shows the entry at once, without a reload.
    assert "receiver fixed" in page.inner_text("#outboxmessage-audit")

    _in_a_thread(lambda: drain.drain(max_seconds=5))
    page.wait_for_selector('#outboxmessage-state [data-status="sent"]')
    page.wait_for_selector("#outboxmessage-attempts .badge-outcome-sent")
    assert page.get_attribute("#outboxmessage-state", "data-live") == "false"
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "repair-message-detail.png", full_page=True)


def test_from_the_stuck_board_a_release_shows_the_whole_receipt_and_returns_with_the_outcome(broken, otto_page, live_server):
    page = otto_page
    page.click('[data-figure="receipts.stuck"]')
    page.wait_for_url("**/stuck/")
    page.screenshot(path=SHOTS / "repair-stuck.png")
    page.click("#stuck-receipts ~ .table-scroll >> text=Release…")
    page.wait_for_selector(".confirm")
    whole = page.inner_text("main")
    for shown in ("order-stuck-9", "refund.create", SCOPE, "LEASE UNTIL", "ATTEMPTS", "stuck: lease expired"):
        assert shown in whole or shown in whole.upper(), shown
    board = _confirm(page, "repair-stuck-confirm.png", ".confirm input[name=reason]", "worker crashed",
                     "text=Confirm release", lambda: page.wait_for_url("**/stuck/"), "main")
    assert "Released order-stuck-9: the caller's next attempt will run." in board and "No receipt is stuck" in board

    # A stuck event from the same board: its whole summary, then back with where it went.
    page.click("#stuck-events-card >> text=Release…")
    page.wait_for_selector("#webhookevent-actions .confirm")
    assert "evt_stuck_1" in page.inner_text("#webhookevent-summary") and "stuck: lease expired" in page.inner_text("main")
    page.click("text=Confirm release")
    page.wait_for_url("**/stuck/")
    assert "Released event evt_stuck_1 from its stuck worker: it is retry now." in page.inner_text("main")
    assert "mail-stuck-1" in page.inner_text("#stuck-messages-card")


def test_a_bulk_release_previews_its_rows_and_summarises_with_its_audit_entries(broken, otto_page, live_server):
    page = otto_page
    page.goto(live_server.url + "/receipts/?status=failed&operation=payment.create")
    page.click("text=Release failed receipts…")
    page.wait_for_selector('[data-role="first-rows"]')
    preview = page.inner_text("#bulk")
    assert "This will release 1 failed receipt." in preview and "order-123" in preview
    assert "OPERATION\npayment.create" in preview.upper().replace("PAYMENT.CREATE", "payment.create")
    assert "STATUS\nFAILED" in preview.upper() and "since" not in preview
    _confirm(page, "repair-bulk-preview.png", "input[name=reason]", "issuer outage over",
             "button:has-text(\"Release 1 failed receipt\")", lambda: page.wait_for_url("**/bulk/*/**"), "#bulk-run")
    # The worker's part (idemdash/core/bulk_runs.py:advance, the task's body), done here while the
    # run's page polls; tests/dashboard/test_browser_bulk.py runs it in a real qcluster.
    run_id = int(page.url.split("/bulk/")[1].split("/")[0])
    _in_a_thread(lambda: bulk_runs.advance(run_id))
    page.wait_for_selector('#bulk-run[data-over="true"]')
    result = page.inner_text("#bulk-run")
    assert "Released 1 of 1" in result and "skipped" not in result
    page.screenshot(path=SHOTS / "repair-bulk-result.png")
    page.click("text=Its audit entries")
    page.wait_for_url(re.compile(r".*/audit/\?run=.*"))
    rows = page.locator("table.data tbody tr")
    assert rows.count() == 1 and "issuer outage over" in rows.inner_text() and "released" in rows.inner_text()


def test_a_viewer_sees_the_same_pages_without_the_actions(broken, browser, live_server):  # noqa: F811
    page = _log_in(browser, live_server, "vera")
    for kind, url in (("receipt", f"/receipts/{broken['receipt'].pk}/"), ("webhookevent", f"/events/{broken['event'].pk}/"),
                      ("outboxmessage", f"/outbox/{broken['message'].pk}/")):
        page.goto(live_server.url + url)
        page.wait_for_selector(f"#{kind}-state [data-status]")
        assert page.locator(f"#{kind}-actions").count() == 0, kind
        assert page.locator("main a.button").count() == 0, kind
    page.goto(live_server.url + "/stuck/")
    board = page.inner_text("main")
    assert "order-stuck-9" in board and "evt_stuck_1" in board and "mail-stuck-1" in board
    assert page.locator("text=Release…").count() == 0
    page.goto(live_server.url + "/receipts/bulk-release/")
    assert "Only operators can release failed receipts." in page.inner_text("#bulk")
    assert page.locator("form.confirm-form").count() == 0
    page.screenshot(path=SHOTS / "repair-viewer-bulk.png")


@pytest.fixture
def held(settings, operator):
    """Two receipts of an operation that holds crashed attempts, each lapsed without settling."""
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    return {"sent": stuck("mail-held-1", operation="email.send"), "unsent": stuck("mail-held-2", operation="email.send")}


def test_an_operator_resolves_held_receipts_from_the_stuck_board_and_the_receipt_page(held, otto_page, live_server):
    page = otto_page
    page.goto(live_server.url + "/stuck/")
    board = page.inner_text("#stuck-receipts ~ .table-scroll")
    assert board.count("outcome unknown") == 2 and "Release…" not in board
    page.screenshot(path=SHOTS / "repair-held-stuck.png")

    # Mark completed from the board, with the result the provider shows: back with the outcome.
    page.click("tr:has-text('mail-held-1') >> text=Mark completed…")
    page.wait_for_selector(".confirm textarea[name=result]")
    summary = page.inner_text("main")
    assert "Outcome unknown — held" in summary and "after a crash: hold" in summary
    assert page.inner_text("[data-role=downstream-key]") == downstream_key(SCOPE, "mail-held-1", held["sent"].created_at)
    page.fill(".confirm textarea[name=result]", '{"sent": true, "provider_id": "msg_81"}')
    board = _confirm(page, "repair-held-mark-completed.png", ".confirm input[name=reason]", "found at the provider",
                     "text=Confirm mark completed", lambda: page.wait_for_url("**/stuck/"), "main")
    assert "Marked mail-held-1 completed: later attempts replay the result." in board
    held["sent"].refresh_from_db()
    assert held["sent"].status == "completed" and held["sent"].response_body == '{"sent":true,"provider_id":"msg_81"}'

    # Run the other one again from its own page, in place.
    page.click("text=mail-held-2")
    page.wait_for_url(f"**/receipts/{held['unsent'].pk}/")
    act_in_place(page, "#receipt-actions >> text=Run again…", "nothing at the provider", "Confirm run again",
                 '#receipt-state [data-status="released"]', warns="it will happen twice", shot="repair-held-run-again.png")
    assert page.evaluate("window.__stayed") is True
    assert "\tRun again\t" in page.inner_text("#receipt-audit")  # the verb, not the stored name
    page.screenshot(path=SHOTS / "repair-held-run-again-done.png", full_page=True)


def test_releasing_a_charge_that_timed_out_is_red_and_names_the_downstream_key_a_declined_one_is_not(operator, otto_page,
                                                                                                       live_server):
    page = otto_page
    timed_out = failed("charge-timeout-1", "payment.capture", error="ReadTimeout: the card processor timed out")
    declined = failed("charge-declined-1", "payment.capture")
    page.goto(f"{live_server.url}/receipts/{timed_out.pk}/")
    page.click("#receipt-actions >> text=Release…")
    caution = page.wait_for_selector(".confirm [data-role=caution]")
    assert downstream_key(SCOPE, "charge-timeout-1", timed_out.created_at) in caution.inner_text()
    assert "happen twice" in caution.inner_text()
    button = page.locator(".confirm button[type=submit]")
    red = button.evaluate("b => getComputedStyle(b).backgroundColor")
    assert "danger" in button.get_attribute("class")
    page.screenshot(path=SHOTS / "repair-release-timed-out-charge.png")

    page.goto(f"{live_server.url}/receipts/{declined.pk}/")
    page.click("#receipt-actions >> text=Release…")
    page.wait_for_selector(".confirm")
    assert page.locator(".confirm [data-role=caution]").count() == 0
    button = page.locator(".confirm button[type=submit]")
    assert "primary" in button.get_attribute("class")
    assert button.evaluate("b => getComputedStyle(b).backgroundColor") != red  # seen as another colour, not just named
    page.screenshot(path=SHOTS / "repair-release-declined-charge.png")
