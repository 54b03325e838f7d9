"""docs/demo.md's walkthrough "Before you reprocess: what already happened", in Debian's
Chromium on the data `manage.py demo_stage` stages: from the order number to the refund's
event, to its Reprocess confirmation, whose preflight lists the confirmation email already
sent. Screenshots go to var/screenshots/ for a human to look at."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from idemdash.devtools import demo
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401  (the fixtures)
from tests.dashboard.test_browser_references import one_sent_in_the_preflight
from tests.webhooks.conftest import SHOPIFY_SECRET

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_demos_staged_refund_shows_its_sent_confirmation_before_a_reprocess(settings, operator_page, live_server):
    from webhooks.models import WebhookEvent

    settings.SHOPIFY_WEBHOOK_SECRET = SHOPIFY_SECRET
    out = StringIO()
    call_command("demo_stage", stdout=out)  # as `make demo` runs it, before the browser starts
    assert "refund already handled, confirmation sent" in out.getvalue()
    order, refund = demo.STAGED_REFUND["order_id"], demo.STAGED_REFUND["id"]
    key = demo.refund_confirmation_key(demo.STAGED_SHOP, refund)
    page = operator_page

    # 1. The customer's order number, in the events list's reference filter.
    page.goto(f"{live_server.url}/events/?ref={order}")
    page.get_by_role("link", name=demo.STAGED_WEBHOOK_ID).click()
    # 2. The event's page: completed, and what its handler referred to.
    page.wait_for_url("**/events/*/")
    assert page.locator('[data-reference="shopify.order:%s"]' % order).count() == 1
    # 3. Reprocess…: the confirmation, before anything is done.
    page.get_by_role("link", name="Reprocess…").click()
    sent = one_sent_in_the_preflight(page, key)
    assert "email.send" in sent.inner_text()
    page.screenshot(path=SHOTS / "demo-preflight-reprocess.png", full_page=True)

    # 4. The email's own page, from the preflight's link: sent, with its attempt.
    sent.get_by_role("link", name=key).click()
    page.wait_for_url("**/outbox/*/")
    assert "sent" in page.locator(".badge-sent").first.inner_text()
    page.screenshot(path=SHOTS / "demo-preflight-message.png", full_page=True)

    # Looking changed nothing: the event is still completed, nothing new in the outbox.
    assert WebhookEvent.objects.get(provider_event_id=demo.STAGED_WEBHOOK_ID).status == "completed"
