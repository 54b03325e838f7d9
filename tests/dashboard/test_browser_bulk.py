"""A bulk send-again in Debian's Chromium: the run's summary moves from queued to "sent n of n"
by itself, with no reload, as the worker requeues the dead messages and then sends them to a
receiver on 127.0.0.1; the audit log shows the run as one entry. Screenshots go to
var/screenshots/bulk-*.png.

The worker's part is its queued tasks taken and run in a thread, as a django-q2 worker runs
them (the package verified, unpickled and called): first the bulk run's, then the send tasks
it queued, so each step is seen on the page. That a real cluster takes queued tasks is
tests/receipts/outbox/test_prompt_send.py's; the page's 2 s poll is brought on by the test's
hold of the page's clock."""

from __future__ import annotations

import pydoc

import pytest
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from idemdash.core import bulk_runs
from idemdash.core.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from receipts.outbox.store import SEND_TASK
from tests.dashboard.build import outbox_message
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page, read_in_place  # noqa: F401  (fixtures)
from tests.receipts.outbox.receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEYS = [f"refund-{n}" for n in range(6)]


def worker_runs(func: str) -> int:
    """Each queued task of `func`, taken off the queue and run as a django-q2 worker runs it;
    how many ran."""
    ran = 0
    for queued in OrmQ.objects.order_by("id"):
        task = SignedPackage.loads(queued.payload)
        if task["func"] == func and OrmQ.objects.filter(pk=queued.pk).delete()[0]:
            pydoc.locate(func)(*task["args"], **task["kwargs"])
            ran += 1
    return ran


def test_a_bulk_send_agains_summary_moves_from_queued_to_sent_without_a_reload(
    operator_page, live_server, outbox_may_post_locally
):
    page = operator_page
    with running_receiver() as receiver:
        for key in KEYS:
            read_in_place(lambda key=key: outbox_message(key, "dead", action="http.post",
                                                         payload={"url": receiver.url, "json": {"refund": key}}))
        page.clock.install()
        page.goto(live_server.url + "/outbox/?status=dead")
        page.click("text=Send dead messages again…")
        page.wait_for_url("**/outbox/bulk-send-again/**")
        page.click("button.primary")
        page.wait_for_url("**/bulk/*/**")
        page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page
        summary = page.locator("#bulk-run")
        first = {"status": summary.get_attribute("data-status"), "settled": summary.get_attribute("data-settled"),
                 "text": summary.inner_text()}
        page.screenshot(path=SHOTS / "bulk-run-1-just-confirmed.png", full_page=True)
        assert first["settled"] == "0" and "Send again 6 dead messages" in first["text"], first

        # The worker runs the bulk run: requeued, not sent yet, seen by the page's own polling.
        assert read_in_place(lambda: worker_runs(bulk_runs.TASK)) == 1
        page.clock.fast_forward(2_000)
        page.wait_for_selector('#bulk-run[data-done="6"]')  # selectors: the CSP refuses eval
        assert "Requeued 6 of 6" in page.locator("#bulk-run").inner_text()
        page.screenshot(path=SHOTS / "bulk-run-2-requeued.png", full_page=True)

        # Then the send tasks the requeue queued: sent, every row settled, the polling stopped.
        assert read_in_place(lambda: worker_runs(SEND_TASK)) == len(KEYS)
        page.clock.fast_forward(2_000)
        page.wait_for_selector('#bulk-run[data-over="true"]')
        page.screenshot(path=SHOTS / "bulk-run-3-settled.png", full_page=True)
        assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
        text = page.locator("#bulk-run").inner_text()
        assert "Requeued 6 of 6" in text and "sent 6 of 6" in text and "every row has settled" in text, text
        assert page.locator("#bulk-run").get_attribute("hx-trigger") is None  # polling stopped
    assert receiver.requests == {key: 1 for key in KEYS}
    assert read_in_place(lambda: set(OutboxMessage.objects.values_list("status", flat=True))) == {"sent"}
    run_entry = read_in_place(lambda: AuditEntry.objects.get(action="bulk_run.start"))
    assert read_in_place(lambda: AuditEntry.objects.filter(
        action="outbox_message.send_again", run_id=int(run_entry.object_id)).count()) == 6
    page.goto(live_server.url + "/audit/")
    rows = page.locator("#audit-table tbody tr")
    assert rows.count() == 1 and "6 item entries" in rows.first.inner_text()
    page.screenshot(path=SHOTS / "bulk-audit-log.png", full_page=True)
