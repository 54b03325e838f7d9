"""The Coverage page in a real browser (Chromium through Playwright), beside a host's write
routes: the unprotected first, a protected one with its operation's figures. The screenshot
(var/screenshots/coverage.png) is for a human to look at."""

from __future__ import annotations

import pytest

from receipts import observe, store
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401 -- fixtures

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True),
              pytest.mark.urls("tests.dashboard.coverage_urls")]


def test_the_coverage_page_shows_what_nothing_protects_first(operator_page, live_server, client):
    claim = store.claim("client:shop", "order-1", "order.create", {"sku": "TEA-1"})
    store.complete(claim.held, body="{}")
    store.claim("client:shop", "order-1", "order.create", {"sku": "TEA-1"})  # a retry, replayed
    for _ in range(2):  # a refund retried where nothing protects it: it ran twice
        client.post("/shop/orders/7/refund/", '{"amount": 500}', content_type="application/json")
    observe.flush()
    page = operator_page
    page.goto(live_server.url + "/")
    page.get_by_role("link", name="Coverage").click()
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
