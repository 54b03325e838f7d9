"""A bulk send-again in Debian's Chromium, with a real `manage.py qcluster` doing the work: the
run's summary moves from queued to "sent n of n" by itself, with no reload, while the worker
requeues the dead messages and the cluster's drain sends them to a receiver on 127.0.0.1;
the audit log shows the run as one entry. Screenshots go to var/screenshots/bulk-*.png."""

from __future__ import annotations

import pytest
from django.db import connection

from receipts.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import outbox_message
from tests.dashboard.test_browser import SHOTS, browser, operator, operator_page  # noqa: F401  (fixtures)
from tests.qcluster import kill_process, signal_stop, start_qcluster
from tests.receipts.outbox.receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

KEYS = [f"refund-{n}" for n in range(6)]


def test_a_bulk_send_agains_summary_moves_from_queued_to_sent_without_a_reload(operator_page, live_server, tmp_path):
    page = operator_page
    # The receiver holds each request a moment, so that "requeued, not sent yet" is visible.
    with running_receiver(lambda key, nth, body: (200, {}, 0.7)) as receiver:
        for key in KEYS:
            outbox_message(key, "dead", action="http.post", payload={"url": receiver.url, "json": {"refund": key}})
        qlog = tmp_path / "qcluster.log"
        cluster = start_qcluster(qlog, OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1")
        try:
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
            # Requeued, not yet all sent: seen on the way, by the page's own polling.
            page.wait_for_selector('#bulk-run[data-done="6"]', timeout=60_000)  # selectors: the CSP refuses eval
            page.screenshot(path=SHOTS / "bulk-run-2-requeued.png", full_page=True)
            page.wait_for_selector('#bulk-run[data-over="true"]', timeout=90_000)
            page.screenshot(path=SHOTS / "bulk-run-3-settled.png", full_page=True)
            assert page.evaluate("window.__sameDocument === true"), "the page was reloaded"
            text = page.locator("#bulk-run").inner_text()
            assert "Requeued 6 of 6" in text and "sent 6 of 6" in text and "every row has settled" in text, text
            assert page.locator("#bulk-run").get_attribute("hx-trigger") is None  # polling stopped
            assert signal_stop(cluster, group=True, within=20) is not None
        finally:
            kill_process(cluster)
            connection.close()
    assert receiver.requests == {key: 1 for key in KEYS}
    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {"sent"}
    run_entry = AuditEntry.objects.get(action="bulk_run.start")
    assert AuditEntry.objects.filter(action="outbox_message.send_again", run_id=int(run_entry.object_id)).count() == 6
    page.goto(live_server.url + "/audit/")
    rows = page.locator("#audit-table tbody tr")
    assert rows.count() == 1 and "6 item entries" in rows.first.inner_text()
    page.screenshot(path=SHOTS / "bulk-audit-log.png", full_page=True)
