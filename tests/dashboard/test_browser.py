"""The dashboard in a real browser: Debian's Chromium driven by Playwright.

Screenshots go to var/screenshots/ for a human to look at.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from django.contrib.auth.models import Group
from django.db import connections

from receipts.models import Receipt
from webhooks.models import WebhookEvent
from tests.browsers import SHOTS, browser  # noqa: F401 (the fixture, which the other browser tests import from here too)
from tests.dashboard.build import completed, failed, mismatched, outbox_message, stuck, waited_for, webhook_event

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("otto", password="pw-otto-browser")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def receipts(settings) -> dict[str, Receipt]:
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}}
    for i in range(6):
        completed(f"order-ok-{i}")
    failed("order-declined")
    return {
        "burned": failed("order-burned", retryable=False),
        "conflict": mismatched("order-422", {"amount": 500, "currency": "eur"}, {"amount": 900, "currency": "eur"}),
        "stale": stuck("order-stuck"),
        "simultaneous": waited_for("email-simultaneous", waiters=3),
        "permanent": completed("welcome-42", "email.welcome"),
    }


def charts_drawn(page, count: int) -> None:
    """Wait until `count` Plotly figures are drawn. Locators, not wait_for_function, whose
    string Playwright evaluates as code in the page: the Content-Security-Policy refuses it."""
    page.locator(".js-plotly-plot .main-svg").nth(count - 1).wait_for(state="attached")


def next_poll(page) -> None:
    """Bring the overview's and the lists' next 15 s poll now: the test holds the page's clock
    (page.clock.install() before the page loaded) and jumps it forward, rather than wait."""
    page.clock.fast_forward(15_000)


def read_in_place(fn):
    """Run `fn` on fresh connections of this thread, closed again after it (tests/browsers.py
    says why a connection opened while Playwright runs needs closing). Fresh before too:
    in one CI run the test thread's connection, idle for the minute a simulator ran, had been
    terminated (AdminShutdown) by the time a roll-up used it (by a late killpg of a reaped
    process's pid, since made safe: tests/qcluster.py:signal_group), and a web request or a
    worker's task would have started on a new connection anyway."""
    connections.close_all()
    try:
        return fn()
    finally:
        connections.close_all()


@pytest.fixture
def operator_page(operator, browser, live_server):
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    page.set_default_timeout(15_000)
    page.goto(live_server.url + "/receipts/")
    assert "/accounts/login/" in page.url
    page.screenshot(path=SHOTS / "login.png")
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto-browser")
    page.click("button[type=submit]")
    page.wait_for_url("**/receipts/")
    return page


def test_an_operator_sees_charts_changes_window_filters_retries_and_explores_a_conflict(
    receipts, operator_page, live_server, browser
):
    page = operator_page
    burned, conflict, stale = receipts["burned"], receipts["conflict"], receipts["stale"]
    simultaneous, permanent = receipts["simultaneous"], receipts["permanent"]

    # Overview: four rendered Plotly charts.
    page.goto(live_server.url + "/")
    charts_drawn(page, 4)
    # 6 + 2 + claim and 422 + stuck + a claim and its 3 waiters + the welcome email
    assert page.inner_text('[data-figure="receipts.requests"] .tile-value') == "16"
    # The callers that waited for the running first attempt are concurrent duplicates, not replays.
    assert page.inner_text('[data-figure="receipts.concurrent_duplicates"] .tile-value') == "3"
    assert page.inner_text('[data-figure="receipts.waited"]') == "3"
    assert page.inner_text('[data-figure="receipts.requests"] .tile-note') == "12 ran · 0 replayed"
    page.screenshot(path=SHOTS / "overview.png", full_page=True)
    page.locator('[data-figure="receipts.concurrent_duplicates"]').screenshot(path=SHOTS / "tile-concurrent.png")

    # Change the window: the figures are swapped in, the URL follows, the page stays.
    page.evaluate("window.__stayed = true")
    page.click('.segmented a:text("1h")')
    page.wait_for_url("**/?window=1h")
    page.wait_for_selector('.segmented a[aria-current="true"]:text("1h")')
    charts_drawn(page, 4)
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "overview-1h.png", full_page=True)

    # Filter receipts by status: the table updates by htmx and the URL can be shared.
    page.goto(live_server.url + "/receipts/")
    page.evaluate("window.__stayed = true")
    page.select_option("select[name=status]", "failed")
    page.wait_for_url("**/receipts/?*status=failed*")
    expect(page.locator("#receipt-table td.key")).to_have_count(2)
    assert sorted(page.locator("#receipt-table td.key").all_inner_texts()) == ["order-burned", "order-declined"]
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "receipts-failed.png", full_page=True)

    # Open the burned key, Release, confirm: the summary changes in place.
    page.click("text=order-burned")
    page.wait_for_url(f"**/receipts/{burned.pk}/")
    assert "the next claim replays the failure" in page.locator("#receipt-summary").inner_text()
    act_in_place(page, "#receipt-actions >> text=Release…", "customer called", "Confirm release", ".alert-success",
                 shot="receipt-retry-confirm.png")
    summary = page.locator("#receipt-summary").inner_text()
    assert "the next claim replays the failure" not in summary
    assert "Released order-burned: the caller's next attempt will run." in summary
    assert "RETRYABLE\nYES" in summary.upper()
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "receipt-retried.png", full_page=True)
    assert read_in_place(lambda: Receipt.objects.get(pk=burned.pk).retryable) is True

    # Release a stuck key: processing -> released, in place.
    page.goto(live_server.url + f"/receipts/{stale.pk}/")
    assert page.get_attribute("[data-status]", "data-status") == "processing"
    page.click("#receipt-actions >> text=Release…")
    page.click("text=Confirm release")
    page.wait_for_selector('[data-status="released"]')

    # The concurrent-duplicates tile leads to the key; its timeline says how long each waited.
    page.goto(live_server.url + "/?window=1h")
    page.click('[data-figure="receipts.concurrent_duplicates"]')
    page.wait_for_url("**/receipts/?conflict=concurrent")
    assert page.locator("#receipt-table td.key").all_inner_texts() == ["email-simultaneous"]
    assert page.inner_text('#receipt-table td[data-count="concurrent"]') == "3"
    page.click("text=email-simultaneous")
    page.wait_for_url(f"**/receipts/{simultaneous.pk}/")
    expect(page.locator(".tl-waited")).to_have_count(3)
    assert all(int(ms) > 0 for ms in page.locator("[data-waited-ms]").evaluate_all("els => els.map(e => e.dataset.waitedMs)"))
    page.screenshot(path=SHOTS / "receipt-waited.png", full_page=True)

    # A once-ever step's receipt is permanent: no expiry, a permanent TTL.
    page.goto(live_server.url + f"/receipts/{permanent.pk}/")
    assert "permanent" in page.inner_text("#receipt-expires").lower()
    assert "TTL permanent" in page.inner_text("#receipt-policy")
    assert "keeps its result for ever" in page.inner_text("#receipt-summary")
    page.screenshot(path=SHOTS / "receipt-permanent.png", full_page=True)

    # The 422: the conflict explorer names the field that differs.
    page.goto(live_server.url + f"/receipts/{conflict.pk}/")
    row = page.locator("tr.diff-changed")
    assert row.count() == 1
    assert "/amount" in row.inner_text() and "500" in row.inner_text() and "900" in row.inner_text()
    page.screenshot(path=SHOTS / "receipt-422.png", full_page=True)

    # The same overview on a phone.
    phone = _on_a_phone(browser, page, live_server, charts=4, shot="phone-overview.png")
    _shoot(phone, live_server, [("/receipts/", "phone-receipts")])


def act_in_place(page, button: str, reason: str, confirm: str, done: str, *, warns: str | None = None,
                 shot: str | None = None) -> None:
    """Open an action's confirmation, check what it warns of, give a reason, confirm, and wait
    for `done`. window.__stayed is set first: a test that finds it still set later knows the
    page was never reloaded."""
    page.evaluate("window.__stayed = true")
    page.click(button)
    page.wait_for_selector(".confirm")
    if warns is not None:
        assert warns in page.inner_text(".confirm")
    page.fill(".confirm input[name=reason]", reason)
    if shot is not None:
        page.screenshot(path=SHOTS / shot, full_page=True)
    page.click(f"text={confirm}")
    page.wait_for_selector(done)

def _on_a_phone(browser, page, live_server, charts: int, shot: str):
    """The same session on a 390x844 phone: its overview, once `charts` charts are drawn."""
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.context.add_cookies(page.context.cookies())
    phone.goto(live_server.url + "/")
    charts_drawn(phone, charts)
    phone.screenshot(path=SHOTS / shot, full_page=True)
    return phone


def _shoot(page, live_server, pages: list[tuple[str, str]]) -> None:
    """A full-page screenshot of each (path, name) for a human to look at."""
    for path, name in pages:
        page.goto(live_server.url + path)
        page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


@pytest.fixture
def flow():
    """Webhook events and outbox messages in every state the pages show."""
    from webhooks.receive import record_rejection
    from webhooks.models import WebhookEndpoint

    for i in range(4):
        webhook_event(f"evt_paid_{i}", "completed", minutes_ago=50 - i * 10)
    webhook_event("evt_stuck", "processing", event_type="checkout.session.completed", minutes_ago=7)
    dead = webhook_event("evt_ledger_down", "dead", event_type="invoice.payment_failed", minutes_ago=20,
                         payload={"id": "evt_ledger_down", "type": "invoice.payment_failed",
                                  "data": {"object": {"id": "in_1", "amount_due": 4200, "currency": "eur"}}})
    record_rejection(WebhookEndpoint.objects.get(slug="stripe"), "stripe", "no_matching_signature",
                     "No signature matched any active secret.", b'{"id": "evt_forged", "type": "charge.succeeded"}')
    outbox_message("mail-1", "sent", minutes_ago=30)
    outbox_message("crm-sync-7", "dead", action="http.post", minutes_ago=25)
    outbox_message("mail-2", "retry", action="http.post", minutes_ago=15)
    outbox_message("mail-3", "pending", minutes_ago=5)
    return {"dead": dead}


def test_an_operator_reprocesses_a_dead_event_in_place_and_sees_webhook_and_outbox_charts(
    flow, operator_page, live_server, browser
):
    page = operator_page
    dead = flow["dead"]

    # Overview: six rendered charts, the webhook and outbox ones among them.
    page.goto(live_server.url + "/")
    charts_drawn(page, 6)
    for chart in ("chart-webhooks", "chart-outbox", "chart-stuck"):
        assert page.locator(f"#{chart} .main-svg").count() >= 1, chart
    assert page.inner_text('[data-figure="webhooks.dead"] .tile-value') == "1"
    assert page.inner_text('[data-figure="outbox.pending"] .tile-value') == "2"
    page.screenshot(path=SHOTS / "overview-flow.png", full_page=True)

    # Webhook events: filter to dead by htmx, the URL follows.
    page.goto(live_server.url + "/events/")
    page.screenshot(path=SHOTS / "events.png", full_page=True)
    page.evaluate("window.__stayed = true")
    page.select_option("select[name=status]", "dead")
    page.wait_for_url("**/events/?*status=dead*")
    expect(page.locator("#event-table td.key")).to_have_count(1)
    assert page.evaluate("window.__stayed") is True

    # Open the dead event, Reprocess, confirm: the status changes in place.
    page.click("text=evt_ledger_down")
    page.wait_for_url(f"**/events/{dead.pk}/")
    assert page.get_attribute("[data-status]", "data-status") == "dead"
    assert "RuntimeError: ledger down" in page.inner_text('[data-role="traceback"]')
    page.screenshot(path=SHOTS / "event-dead.png", full_page=True)
    act_in_place(page, "text=Reprocess…", "ledger is back", "Confirm reprocess", '[data-status="received"]',
                 shot="event-reprocess-confirm.png")
    assert "Reprocessing event evt_ledger_down: it is received" in page.inner_text("#webhookevent-summary")
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "event-reprocessed.png", full_page=True)
    assert read_in_place(lambda: WebhookEvent.objects.get(pk=dead.pk).status) == "received"

    _shoot(page, live_server, [("/rejected/", "rejected"), ("/outbox/", "outbox"), ("/stuck/", "stuck-all")])
    page.goto(live_server.url + "/outbox/?status=dead")
    page.click("text=crm-sync-7")
    page.wait_for_selector("#outboxmessage-summary")
    page.screenshot(path=SHOTS / "message-dead.png", full_page=True)

    phone = _on_a_phone(browser, page, live_server, charts=6, shot="phone-overview-flow.png")
    phone.locator("#chart-stuck").screenshot(path=SHOTS / "phone-chart-stuck.png")
    _shoot(phone, live_server, [("/events/", "phone-events"), (f"/events/{dead.pk}/", "phone-event"),
                                ("/outbox/", "phone-outbox"), ("/stuck/", "phone-stuck")])


def test_a_receipt_page_shows_the_policy_the_operation_got(operator_page, live_server):
    receipt = read_in_place(lambda: completed("order-policy"))  # payment.create: financial by default
    page = operator_page
    page.goto(f"{live_server.url}/receipts/{receipt.pk}/")
    policy = page.locator("#receipt-policy")
    policy.wait_for()
    text = policy.inner_text()
    assert "FINANCIAL" in text.upper() and "TTL 7 d" in text and "on failure: retry" in text
    assert "RECEIPTS_FINANCIAL_OPERATIONS 'payment.*'" in text
    page.screenshot(path=SHOTS / "receipt_policy.png", full_page=True)
