"""Search and trace by business id in Debian's Chromium: an order id typed in the header's box
finds its receipt, webhook events and outbox message, and the trace orders what happened to
them. Screenshots go to var/screenshots/search-*.png."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from idemdash.core import audit
from receipts import store
from tests.dashboard.build import SCOPE, outbox_message, webhook_event
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ORDER = "ord_2026_1184"


@pytest.fixture
def order(operator):  # noqa: F811
    """One order, as a shop's traffic leaves it: the payment's receipt (40 min ago), Stripe's
    event (35), Shopify's (30), the receipt email (25, sent at its second attempt), an
    operator's reprocess of the Stripe event (20); and a receipt of another order."""
    now = timezone.now()
    with time_machine.travel(now - timedelta(minutes=40), tick=False):
        claim = store.claim(SCOPE, f"checkout:{ORDER}", "payment.create", {"order": ORDER, "amount": 4200})
        store.complete(store.Held(SCOPE, f"checkout:{ORDER}", claim.token), response_status=201, content_type="application/json",
                       body='{"payment_intent": "pi_3Q1184", "charge": "ch_3Q1184"}')
    with time_machine.travel(now - timedelta(minutes=39), tick=False):
        other = store.claim(SCOPE, "checkout:ord_2026_1185", "payment.create", {"order": "ord_2026_1185"})
        store.complete(store.Held(SCOPE, "checkout:ord_2026_1185", other.token), response_status=201, body="{}")
    stripe = webhook_event("evt_3Q1184", "completed", minutes_ago=35, event_type="payment_intent.succeeded", payload={
        "id": "evt_3Q1184", "type": "payment_intent.succeeded",
        "data": {"object": {"id": "pi_3Q1184", "latest_charge": "ch_3Q1184", "metadata": {"order_id": ORDER}}}})
    webhook_event("1184-paid", slug="shopify", provider="shopify", minutes_ago=30, event_type="orders/paid",
                  payload={"id": 5001184, "name": "#1184", "note_attributes": [{"name": "order", "value": ORDER}]})
    outbox_message(f"receipt-email:{ORDER}", "retry", minutes_ago=25)
    from receipts.outbox import store as outbox_store
    from receipts.outbox.models import OutboxMessage

    with time_machine.travel(now - timedelta(minutes=24), tick=False):
        OutboxMessage.objects.filter(key=f"receipt-email:{ORDER}").update(next_attempt_at=timezone.now())
        (message,) = outbox_store.claim_batch("test-drainer", batch_size=10)
        outbox_store.mark_sent(message, status_code=200, duration_ms=40, drainer="test-drainer")
    with time_machine.travel(now - timedelta(minutes=20), tick=False):
        audit.record("otto", "webhook_event.reprocess", stripe, "completed", "received", "check the ledger entry",
                     user=operator)


def test_an_order_id_finds_its_receipt_events_and_message_and_the_trace_orders_them(order, operator_page, live_server):
    page = operator_page
    page.goto(live_server.url + "/")
    box = page.locator("header form.search-box input[name=q]")
    box.fill(ORDER)
    box.press("Enter")
    page.wait_for_url(f"**/search/?q={ORDER}")
    results = page.locator("#search-results")
    assert page.locator('[data-kind="receipt"] td.key').all_inner_texts() == [f"checkout:{ORDER}"]
    assert page.locator('[data-kind="event"] td.key').all_inner_texts() == ["1184-paid", "evt_3Q1184"]
    assert page.locator('[data-kind="message"] td.key').all_inner_texts() == [f"receipt-email:{ORDER}"]
    assert "4 found for" in results.inner_text()
    # The header's box keeps the id, on a page as wide as a laptop's.
    assert box.input_value() == ORDER
    assert page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth") <= 0
    page.screenshot(path=SHOTS / "search-order.png", full_page=True)

    page.click('[data-role="trace-link"]')
    page.wait_for_url(f"**/trace/?q={ORDER}")
    rows = page.locator("#trace-timeline tbody tr")
    steps = [(r.get_attribute("data-kind"), r.locator("td").nth(2).inner_text()) for r in rows.all()]
    assert steps == [
        ("receipt", "claimed"), ("receipt", "completed"),
        ("event", "received"), ("event", "processing #1: completed"),
        ("event", "received"),
        ("message", "enqueued (email.send)"), ("message", "send #1: retry"), ("message", "send #2: sent"),
        ("event", "Reprocess"),
    ], steps
    times = page.locator("#trace-timeline tbody time").evaluate_all("els => els.map(e => e.getAttribute('datetime'))")
    assert times == sorted(times)
    assert page.locator('#trace-timeline tr[data-source="operator"] td').nth(4).inner_text() == "otto"
    page.screenshot(path=SHOTS / "search-trace.png", full_page=True)

    # Text that is no id: a clear message, not an error page.
    page.goto(live_server.url + "/search/?q=" + "x" * 600)
    assert "the longest id searched for is 512" in page.inner_text('[data-role="search-error"]')
