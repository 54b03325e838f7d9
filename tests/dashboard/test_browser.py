"""The dashboard in a real browser: Debian's Chromium driven by Playwright.

Screenshots go to var/screenshots/ for a human to look at.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import connections

from receipts.models import Receipt
from tests.dashboard.build import completed, failed, mismatched, stuck

# Playwright's sync API runs an event loop in this thread; Django then refuses ORM calls
# from it unless told that this is deliberate (documented pytest-django workaround).
# Even so, an ORM call made while Playwright runs gets a connection of its own (Django's
# connections are context-local) that nobody closes, so the data is made before the
# browser starts, and the one read during the test closes what it opened.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("IDEMDASH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (or run .ci/run)")
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync"],
        )
        yield b
        b.close()


@pytest.fixture
def operator(django_user_model):
    user = django_user_model.objects.create_user("otto", password="pw-otto-browser")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def receipts() -> dict[str, Receipt]:
    for i in range(6):
        completed(f"order-ok-{i}")
    failed("order-declined")
    return {
        "burned": failed("order-burned", retryable=False),
        "conflict": mismatched("order-422", {"amount": 500, "currency": "eur"}, {"amount": 900, "currency": "eur"}),
        "stale": stuck("order-stuck"),
    }


def read_in_place(fn):
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

    # Overview: four rendered Plotly charts.
    page.goto(live_server.url + "/")
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4")
    assert page.inner_text('[data-figure="receipts.requests"] .tile-value') == "11"  # 6 + 2 + claim and 422 + stuck
    page.screenshot(path=SHOTS / "overview.png", full_page=True)

    # Change the window: the figures are swapped in, the URL follows, the page stays.
    page.evaluate("window.__stayed = true")
    page.click('.segmented a:text("1h")')
    page.wait_for_url("**/?window=1h")
    page.wait_for_selector('.segmented a[aria-current="true"]:text("1h")')
    page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4")
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "overview-1h.png", full_page=True)

    # Filter receipts by status: the table updates by htmx and the URL can be shared.
    page.goto(live_server.url + "/receipts/")
    page.evaluate("window.__stayed = true")
    page.select_option("select[name=status]", "failed")
    page.wait_for_url("**/receipts/?*status=failed*")
    page.wait_for_function("document.querySelectorAll('#receipt-table td.key').length === 2")
    assert sorted(page.locator("#receipt-table td.key").all_inner_texts()) == ["order-burned", "order-declined"]
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "receipts-failed.png", full_page=True)

    # Open the burned key, Retry, confirm: the summary changes in place.
    page.click("text=order-burned")
    page.wait_for_url(f"**/receipts/{burned.pk}/")
    assert "the next claim replays the failure" in page.locator("#receipt-summary").inner_text()
    page.evaluate("window.__stayed = true")
    page.click("text=Retry…")
    page.wait_for_selector(".confirm")
    page.fill(".confirm input[name=reason]", "customer called")
    page.screenshot(path=SHOTS / "receipt-retry-confirm.png", full_page=True)
    page.click("text=Confirm retry")
    page.wait_for_selector(".alert-success")
    summary = page.locator("#receipt-summary").inner_text()
    assert "the next claim replays the failure" not in summary and "Retry: order-burned is now failed" in summary
    assert "RETRYABLE\nYES" in summary.upper()
    assert page.evaluate("window.__stayed") is True
    page.screenshot(path=SHOTS / "receipt-retried.png", full_page=True)
    assert read_in_place(lambda: Receipt.objects.get(pk=burned.pk).retryable) is True

    # Release a stuck key: processing -> failed, in place.
    page.goto(live_server.url + f"/receipts/{stale.pk}/")
    assert page.get_attribute("[data-status]", "data-status") == "processing"
    page.click("text=Release…")
    page.click("text=Confirm release")
    page.wait_for_selector('[data-status="failed"]')

    # The 422: the conflict explorer names the field that differs.
    page.goto(live_server.url + f"/receipts/{conflict.pk}/")
    row = page.locator("tr.diff-changed")
    assert row.count() == 1
    assert "/amount" in row.inner_text() and "500" in row.inner_text() and "900" in row.inner_text()
    page.screenshot(path=SHOTS / "receipt-422.png", full_page=True)

    # The same overview on a phone.
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.context.add_cookies(page.context.cookies())
    phone.goto(live_server.url + "/")
    phone.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4")
    phone.screenshot(path=SHOTS / "phone-overview.png", full_page=True)
    phone.goto(live_server.url + "/receipts/")
    phone.screenshot(path=SHOTS / "phone-receipts.png", full_page=True)
