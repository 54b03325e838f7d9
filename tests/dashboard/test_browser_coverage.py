"""The Coverage page in a real browser (Chromium through Playwright), beside a host's write
routes: the overview's would-be duplicates tile leads to it, and it lists the unprotected first,
a protected one with its operation's figures; the fresh-key retries tile leads to its latest,
whose keys lead to the receipts that name each other. The screenshots (var/screenshots/coverage.png,
tile-unprotected.png, tile-fresh-keys.png, receipt-fresh-key.png) are for a human to look at."""

from __future__ import annotations

import pytest

from receipts import observe, store
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.urls("tests.dashboard.coverage_urls")]


def test_the_coverage_page_shows_what_nothing_protects_first(operator_page, live_server, client, settings):
    settings.RECEIPTS_OPERATIONS = {"refund.*": {"fresh_key": "refuse"}}
    store.claim("client:agent", "mail-1", "email.send", {"to": "a@example.com"})
    store.claim("client:agent", "mail-1-again", "email.send", {"to": "a@example.com"})  # ran again
    store.claim("client:agent", "refund-1", "refund.create", {"order": 7})
    store.claim("client:agent", "refund-1-again", "refund.create", {"order": 7})  # refused
    claim = store.claim("client:shop", "order-1", "order.create", {"sku": "TEA-1"})
    store.complete(claim.held, body="{}")
    store.claim("client:shop", "order-1", "order.create", {"sku": "TEA-1"})  # a retry, replayed
    for _ in range(2):  # a refund retried where nothing protects it: it ran twice
        client.post("/shop/orders/7/refund/", '{"amount": 500}', content_type="application/json")
    observe.flush()
    page = operator_page
    page.goto(live_server.url + "/?window=1h")
    tile = page.locator('[data-figure="unprotected.duplicates"]')
    assert tile.locator(".tile-value").inner_text() == "1"
    assert "50% of 2 write requests to routes nothing protects" in tile.locator(".tile-note").inner_text()
    assert page.locator("#chart-unprotected .main-svg").count() >= 1  # Plotly drew the chart
    tile.screenshot(path=SHOTS / "tile-unprotected.png")
    fresh = page.locator('[data-figure="fresh_keys.ran_again"]')
    assert fresh.locator(".tile-value").inner_text() == "1"
    assert "1 refused (409)" in fresh.locator(".tile-note").inner_text()
    assert page.locator("#chart-fresh-keys .main-svg").count() >= 1
    fresh.screenshot(path=SHOTS / "tile-fresh-keys.png")
    page.screenshot(path=SHOTS / "overview-unprotected.png", full_page=True)
    tile.click()
    page.wait_for_url("**/coverage/")
    rows = page.locator("tbody tr")
    assert rows.first.get_attribute("data-protected") == "no"
    assert page.locator("tbody tr[data-protected='no']").count() == 10
    order = page.locator("tbody tr", has_text="/shop/orders/").filter(has_text="order.create")
    assert order.locator("td.num").all_inner_texts() == ["1 key", "1"]
    assert "14 of 24 protected" in page.locator("#coverage-routes").text_content()
    refund = page.locator("tbody tr", has_text="/shop/orders/<int:pk>/refund/").filter(has_text="POST")
    assert refund.locator("td.num").all_inner_texts() == ["2 requests", "1"]
    assert page.locator("section", has_text="Latest would-be duplicates").locator("tbody tr").count() == 1
    page.screenshot(path=SHOTS / "coverage.png", full_page=True)
    latest = page.locator("#coverage-fresh-keys tbody tr")
    assert latest.count() == 2
    assert "refused (409)" in latest.nth(0).inner_text() and "ran again" in latest.nth(1).inner_text()
    latest.nth(1).get_by_role("link", name="mail-1", exact=True).click()
    page.wait_for_url("**/receipts/*/")
    marker = page.locator('[data-role="same-request"]')
    assert "the same request as mail-1-again" in marker.inner_text() and "later" in marker.inner_text()
    page.screenshot(path=SHOTS / "receipt-fresh-key.png", full_page=True)
