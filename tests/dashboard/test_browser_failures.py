"""The Failures page in Debian's Chromium: a partner's refusals are one group; from it the
operator opens the group's dead messages, sends them again from the bulk preview, and sees
the group's Now column empty once the worker has sent them. Screenshots go to
var/screenshots/failures-*.png."""

from __future__ import annotations

import pytest

from idemdash.core import bulk_runs
from idemdash.core.failures import FailureGroup
from receipts.outbox.models import OutboxMessage
from receipts.outbox.store import SEND_TASK
from tests.dashboard.build import outbox_message, webhook_event
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page, read_in_place  # noqa: F401  (fixtures)
from tests.dashboard.test_browser_bulk import worker_runs
from tests.receipts.outbox.receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEYS = [f"invoice-copy-{n}" for n in range(4)]


def test_a_partners_refusals_are_one_group_whose_dead_messages_are_sent_again_from_it(
    operator_page, live_server, outbox_may_post_locally
):
    page = operator_page
    page.set_viewport_size({"width": 1440, "height": 900})
    with running_receiver() as receiver:
        for key in KEYS:
            read_in_place(lambda key=key: outbox_message(key, "dead", action="http.post",
                                                         payload={"url": receiver.url, "json": {"invoice": key}}))
        read_in_place(lambda: webhook_event("evt_bug_1", "dead", event_type="refunds/create"))
        page.goto(live_server.url + "/failures/")
        rows = page.locator("#failure-table tbody tr")
        assert rows.count() == 2
        group = read_in_place(lambda: FailureGroup.objects.get(kind="message"))
        row = page.locator(f'tr[data-group="{group.signature}"]')
        assert "HTTP 400: bad request" in row.inner_text() and "http.post 127.0.0.1" in row.inner_text()
        assert row.locator("td.num").inner_text() == "4"
        page.screenshot(path=SHOTS / "failures-groups.png", full_page=True)
        # The header keeps one line at 1440 px with the page in it: the account beside the brand.
        assert abs(page.locator(".who").bounding_box()["y"] - page.locator(".brand").bounding_box()["y"]) < 20

        row.locator("text=4 dead").click()
        page.wait_for_url("**/outbox/?group=*")
        assert page.locator("#outbox-table tbody tr").count() == 4
        page.click("text=Send dead messages again…")
        page.wait_for_url("**/outbox/bulk-send-again/**")
        assert page.locator("[data-count]").first.get_attribute("data-count") == "4"
        page.screenshot(path=SHOTS / "failures-group-bulk-preview.png", full_page=True)
        page.click("button.primary")
        page.wait_for_url("**/bulk/*/**")
        assert read_in_place(lambda: worker_runs(bulk_runs.TASK)) == 1
        assert read_in_place(lambda: worker_runs(SEND_TASK)) == len(KEYS)

        page.goto(live_server.url + "/failures/")
        assert "none failing" in page.locator(f'tr[data-group="{group.signature}"] [data-role=units]').inner_text()
        page.screenshot(path=SHOTS / "failures-group-repaired.png", full_page=True)
    assert receiver.requests == {key: 1 for key in KEYS}
    assert read_in_place(lambda: set(OutboxMessage.objects.values_list("status", flat=True))) == {"sent"}
