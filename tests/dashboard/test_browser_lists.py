"""Lists at 1440x900 in Debian's Chromium: the admin's changelists fit the window with long
keys on one line, and screenshots of the receipts list, the audit log and the changelists
go to var/screenshots/ for a human to look at."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F

from receipts import store
from receipts.models import Receipt
from tests.dashboard.build import completed, failed, mismatched, outbox_message, webhook_event
from tests.dashboard.test_browser import SHOTS, browser  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG_KEY = "checkout-2026-11-24-7f3c9a1e-5b2d-4c8e-9f60-1a2b3c4d5e6f-retry-window"

CHANGELISTS = [
    "receipts/receipt", "receipts/attempt", "idemdash_core/auditentry", "receipts/archivedreceipt",
    "outbox/outboxmessage", "outbox/outboxattempt", "webhooks/webhookevent", "webhooks/webhookdelivery",
    "webhooks/rejecteddelivery", "idemdash_dashboard/alert", "idemdash_dashboard/alertrule",
]


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw-root-browser")


@pytest.fixture
def rows(admin_user):
    for i in range(5):
        completed(f"order-ok-{i}")
    failed(LONG_KEY, "payment.create", scope="client:a-rather-long-client-name-for-scopes")
    released = failed("order-released", retryable=False)
    store.release(released, actor="root", user=admin_user, reason="the card issuer was down")
    mismatched("order-422", {"amount": 500}, {"amount": 900})
    store.claim("client:shop", "order-422", "payment.create", {"amount": 500})
    outbox_message(LONG_KEY, "retry")
    webhook_event("evt_" + "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "retry", event_type="customer.subscription.trial_will_end")
    # On a loaded machine the rows are changed a second or more after they were created, and
    # the lists then show a "changed" line under each time (CI once found the receipts table 23
    # px too wide that way): every row is changed later here, so the widest case is the one tested.
    Receipt.objects.update(updated_at=F("updated_at") + timedelta(seconds=3))


@pytest.fixture
def page(browser, live_server, admin_user):  # noqa: F811
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(15_000)
    page.goto(live_server.url + "/admin/login/?next=/admin/")
    page.fill("input[name=username]", "root")
    page.fill("input[name=password]", "pw-root-browser")
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    return page


def overflow(page) -> int:
    return page.evaluate("document.scrollingElement.scrollWidth - window.innerWidth")


def test_admin_changelists_fit_1440_pixels_with_long_keys_on_one_line(rows, page, live_server):
    for path in CHANGELISTS:
        page.goto(f"{live_server.url}/admin/{path}/")
        page.wait_for_selector("#changelist")
        assert overflow(page) <= 0, f"{path} is {overflow(page)} px wider than the window"
        cut = page.evaluate("[...document.querySelectorAll('#changelist .results')].map(e => e.scrollWidth - e.clientWidth)")
        assert all(px <= 0 for px in cut), f"{path}: the table scrolls {cut} px inside its box (columns cut off)"
        page.screenshot(path=SHOTS / f"admin-{path.replace('/', '-')}.png")
    for path in ("receipts/receipt", "outbox/outboxmessage"):
        page.goto(f"{live_server.url}/admin/{path}/")
        key = page.locator(f'#result_list span[title="{LONG_KEY}"]')
        assert key.count() == 1
        assert key.evaluate("el => el.getClientRects().length") == 1, f"the long key wraps on {path}"
        assert key.inner_text().endswith("…")
        # Times to the second, with their zone.
        cells = page.locator("#result_list td, #result_list th").all_inner_texts()
        assert any(t.strip().endswith(" UTC") and t.count(":") == 2 for t in cells), cells


def test_dashboard_lists_at_1440_pixels(rows, page, live_server):
    page.goto(live_server.url + "/receipts/")
    page.wait_for_selector("#receipt-table")
    assert "shown of 8 matching" in page.inner_text('[data-role="total"]')
    assert overflow(page) <= 0
    page.screenshot(path=SHOTS / "lists-receipts.png", full_page=True)
    page.goto(live_server.url + "/audit/")
    subject = page.locator('[data-role="subject"] a.key')
    assert subject.first.inner_text() == "order-released"
    page.screenshot(path=SHOTS / "lists-audit.png", full_page=True)
    page.goto(live_server.url + "/events/")
    assert page.locator('[data-role="next-attempt"]').count() == 1
    page.screenshot(path=SHOTS / "lists-events.png", full_page=True)
    page.goto(live_server.url + "/outbox/")
    page.screenshot(path=SHOTS / "lists-outbox.png", full_page=True)


def test_a_long_key_stays_on_one_line_in_the_dashboard_lists(rows, page, live_server):
    for path, table in (("/receipts/", "#receipt-table"), ("/outbox/", "#outbox-table")):
        page.goto(live_server.url + path)
        key = page.locator(f'{table} td.key a[title="{LONG_KEY}"]')
        assert key.evaluate("el => el.getClientRects().length") == 1, path
        assert key.evaluate("el => el.scrollWidth > el.clientWidth"), "cut with an ellipsis, not wrapped"
        assert overflow(page) <= 0
        cut = page.evaluate(f"(e => e.scrollWidth - e.clientWidth)(document.querySelector('{table} .table-scroll'))")
        assert cut <= 0, f"{path}: the table scrolls {cut} px inside its card (columns cut off)"


def test_an_admin_marks_a_held_receipt_completed_with_a_result_from_the_changelist(page, live_server, settings):
    # The repair of receipts/admin.py, driven as an operator does: select, choose the action,
    # give the result on the form between, and read the outcome on the changelist.
    from datetime import timedelta

    from django.utils import timezone

    from idemdash.core.models import AuditEntry

    from receipts.models import Receipt

    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"after_crash": "hold"}}
    store.claim("client:shop", "capture-held", "payment.capture", {"amount": 100})
    Receipt.objects.filter(key="capture-held").update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    page.goto(f"{live_server.url}/admin/receipts/receipt/")
    row = page.locator("#result_list tr", has_text="capture-held")
    assert "outcome-unknown" in row.inner_text()
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", "mark_completed")
    page.click("button[name=index]")
    page.wait_for_selector("textarea[name=result]")
    page.fill("textarea[name=result]", '{"id": "pi_found"}')
    page.fill("input[name=reason]", "Stripe shows pi_found for the downstream key")
    page.screenshot(path=SHOTS / "admin-receipt-mark-completed-form.png")
    page.click("input[name=apply]")
    page.wait_for_selector(".messagelist")
    assert "Mark completed: 1 receipt(s)." in page.inner_text(".messagelist")
    assert "completed" in page.locator("#result_list tr", has_text="capture-held").inner_text()
    page.screenshot(path=SHOTS / "admin-receipt-mark-completed-done.png")
    assert AuditEntry.objects.filter(action="receipt.mark_completed").count() == 1


@pytest.mark.parametrize("path, table", [("/receipts/", "#receipt-table"), ("/events/", "#event-table"),
                                         ("/outbox/", "#outbox-table"), ("/audit/", "#audit-table")])
def test_a_filter_the_server_refuses_shows_why_instead_of_looking_applied(rows, page, live_server, path, table):
    page.goto(live_server.url + path)
    page.wait_for_selector(table)
    field = page.locator("form.filters input[type=text]").first
    # Longer than the field takes (a pasted id): the form refuses it, and its answer replaces the list.
    field.fill("order-" + "9" * 300)
    page.wait_for_selector(f"{table} .alert-error")
    assert "Ensure this value has at most" in page.inner_text(table)
    assert page.locator(f"{table} table.data tbody tr").count() == 0  # no list that looks filtered
    # A NUL, which the middleware refuses before any view: the list stays, marked stale, and why is said.
    field.evaluate("el => { el.value = 'order-\\u0000pasted'; el.dispatchEvent(new Event('input', {bubbles: true})); }")
    assert "\x00" in field.input_value()
    page.wait_for_selector('[data-role="refused"]')
    assert "A NUL character is not accepted" in page.inner_text('[data-role="refused"]')
    assert "stale" in page.get_attribute(table, "class")
    assert "%00" not in page.url  # not pushed into the history: a reload shows the last filter it took
    if path == "/receipts/":
        page.screenshot(path=str(SHOTS / "refused-filter.png"))
    field.fill("")  # a filter it takes: the list again, neither stale nor refused
    page.wait_for_selector(f"{table}:not(.stale) table.data tbody tr")
    assert page.locator('[data-role="refused"]').count() == 0
