"""References and causation in Debian's Chromium: from a receipt to the outbox message its step
enqueued and back, from a webhook event to its handler's message and back, and from a
reference to the list filtered by it. Screenshots go to var/screenshots/ for a human to look at."""

from __future__ import annotations

import pytest

from tests.dashboard.build import charged, completed, handled_event
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401  (the fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_follows_cause_and_effect_both_ways_and_filters_by_a_reference(operator_page, live_server):
    page = operator_page
    receipt, mail = charged("order-1042", "ch_3MtwBw")
    completed("order-1043")
    event, notification = handled_event("evt_1Qx9", "ch_3MtwBw")

    # The receipt's page: its references and the message its step enqueued.
    page.goto(f"{live_server.url}/receipts/{receipt.pk}/")
    card = page.locator("#receipt-references")
    assert card.locator('[data-reference="stripe.charge:ch_3MtwBw"]').count() == 1
    assert card.locator('[data-reference="order:1042"]').count() == 1
    card.scroll_into_view_if_needed()
    page.screenshot(path=SHOTS / "references-receipt.png", full_page=True)
    card.get_by_role("link", name="receipt-mail-ch_3MtwBw").click()

    # The message's page names the receipt it was enqueued under; back to it by that link.
    page.wait_for_url(f"**/outbox/{mail.pk}/")
    cause = page.locator("#message-cause")
    assert "the receipt order-1042" in cause.inner_text()
    cause.scroll_into_view_if_needed()
    page.screenshot(path=SHOTS / "references-message-cause.png", full_page=True)
    cause.get_by_role("link", name="order-1042").click()
    page.wait_for_url(f"**/receipts/{receipt.pk}/")

    # The webhook event: to its handler's message and back.
    page.goto(f"{live_server.url}/events/{event.pk}/")
    page.locator("#event-references").get_by_role("link", name="notify-ch_3MtwBw").click()
    page.wait_for_url(f"**/outbox/{notification.pk}/")
    assert "the webhook event charge.succeeded evt_1Qx9" in page.locator("#message-cause").inner_text()
    page.locator("#message-cause").get_by_role("link").click()
    page.wait_for_url(f"**/events/{event.pk}/")

    # From a reference to everything that names it: the receipts list filtered by its value.
    page.goto(f"{live_server.url}/receipts/{receipt.pk}/")
    page.locator('[data-reference="stripe.charge:ch_3MtwBw"]').get_by_role("link", name="receipts").click()
    page.wait_for_url("**/receipts/?ref=ch_3MtwBw")
    page.wait_for_selector("#receipt-table")
    keys = page.locator("#receipt-table td.key").all_inner_texts()
    assert [k.strip() for k in keys] == ["order-1042"]
    assert page.locator('input[name="ref"]').input_value() == "ch_3MtwBw"
    page.screenshot(path=SHOTS / "references-filtered-list.png", full_page=True)


def one_sent_in_the_preflight(page, key: str):
    """The open confirmation's preflight lists one message, sent, under `key` (downstream key
    too), scrolled into view; returns its line."""
    preflight = page.locator('[data-role="side-effects"]')
    preflight.wait_for()
    assert "1 side effect sent" in preflight.inner_text()
    sent = preflight.locator('[data-side-effect="message"][data-status="sent"]')
    assert sent.count() == 1 and key in sent.inner_text()
    assert preflight.locator('[data-role="downstream-key"]').inner_text() == key
    preflight.scroll_into_view_if_needed()
    return sent


def test_the_reprocess_confirmation_shows_the_side_effect_already_sent_before_the_click(operator_page, live_server):
    """Issue 22's preflight: an operator about to reprocess an event whose handler already
    enqueued a message that was sent sees that message, sent, with its downstream key."""
    from receipts.outbox.models import OutboxMessage
    from webhooks.models import WebhookEvent

    page = operator_page
    event, message = handled_event("evt_refund_7", "ch_refund_7")
    OutboxMessage.objects.filter(pk=message.pk).update(status="sent")
    page.goto(f"{live_server.url}/events/{event.pk}/")
    page.get_by_role("link", name="Reprocess…").click()
    one_sent_in_the_preflight(page, "notify-ch_refund_7")
    page.screenshot(path=SHOTS / "preflight-reprocess.png", full_page=True)
    # Nothing was done by looking: the event is as it was.
    assert WebhookEvent.objects.get(pk=event.pk).status == "completed"
