"""Bulk reprocess of dead webhook events and bulk send-again of dead outbox messages."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from idemdash.core.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import confirm_bulk, outbox_message, webhook_event
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def dead_rows():
    webhook_event("evt_1", "dead", event_type="charge.failed")
    webhook_event("evt_2", "dead", event_type="charge.failed")
    webhook_event("evt_3", "dead", event_type="invoice.paid")
    webhook_event("evt_4", "completed", event_type="charge.failed")
    outbox_message("m1", "dead", action="http.post")
    outbox_message("m2", "dead", action="email.send")
    outbox_message("m3", "sent", action="http.post")


def test_the_event_preview_counts_the_dead_events_the_filter_matches(operator_client, dead_rows):
    html = operator_client.get("/events/bulk-reprocess/?type=charge.failed").content.decode()
    assert 'data-count="2"' in html and "Reprocess 2 dead events" in html
    assert not AuditEntry.objects.exists()


def test_the_event_preview_names_the_first_events_and_the_filter_by_label(operator_client, dead_rows):
    html = operator_client.get("/events/bulk-reprocess/?type=charge.failed").content.decode()
    assert "<dt>Event type</dt><dd>charge.failed</dd>" in html and "<dt>Status</dt><dd>Dead</dd>" in html
    assert ">evt_1</code>" in html and ">evt_2</code>" in html and ">evt_3</code>" not in html


def test_confirming_reprocesses_exactly_the_previewed_events_in_a_run(operator_client, dead_rows):
    run, html = confirm_bulk(operator_client, "/events/bulk-reprocess/", {"type": "charge.failed", "status": "dead"})
    assert run.title == "Reprocess 2 dead events" and run.status == "finished"
    assert "Requeued 2 of 2" in html and 'data-over="false"' in html  # not processed yet: it keeps polling
    # Finished acting, not yet settled: the badge says so, not "finished".
    assert 'data-role="run-badge" title="every row was acted on; 2 not settled yet">settling</span>' in html
    assert "type=charge.failed" in html  # back to the list with the same filter
    statuses = dict(WebhookEvent.objects.values_list("provider_event_id", "status"))
    assert statuses == {"evt_1": "received", "evt_2": "received", "evt_3": "dead", "evt_4": "completed"}
    assert AuditEntry.objects.filter(action="webhook_event.reprocess", actor="otto", run=run).count() == 2
    audit_url = html.split('href="/audit/?')[1].split('"')[0].replace("&amp;", "&")
    assert len(re.findall(r'href="/events/\d+/"', operator_client.get("/audit/?" + audit_url).content.decode())) == 2


def test_the_outbox_preview_and_confirm_touch_the_dead_messages_only(operator_client, dead_rows):
    assert 'data-count="1"' in operator_client.get("/outbox/bulk-send-again/?action=http.post").content.decode()
    run, html = confirm_bulk(operator_client, "/outbox/bulk-send-again/", {"action": "http.post"})
    assert "Requeued 1 of 1" in html and "Send again 1 dead message" in html
    statuses = dict(OutboxMessage.objects.values_list("key", "status"))
    assert statuses == {"m1": "pending", "m2": "dead", "m3": "sent"}
    assert AuditEntry.objects.filter(action="outbox_message.send_again").count() == 1


def test_nothing_to_do_says_so(operator_client, dead_rows):
    assert "Nothing to reprocess" in operator_client.get("/events/bulk-reprocess/?type=nothing").content.decode()
    assert "Nothing to send again" in operator_client.get("/outbox/bulk-send-again/?action=crm.sync").content.decode()


@pytest.mark.parametrize("url", ["/events/bulk-reprocess/", "/outbox/bulk-send-again/"])
def test_a_viewer_sees_the_preview_but_a_post_is_403(viewer_client, dead_rows, url):
    html = viewer_client.get(url).content.decode()
    assert "data-count=" in html and "Only operators" in html
    assert viewer_client.post(url, {}).status_code == 403
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("url", ["/events/bulk-reprocess/", "/outbox/bulk-send-again/"])
def test_it_needs_the_csrf_token(operator, dead_rows, url):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post(url, {}).status_code == 403
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("url", ["/events/bulk-reprocess/", "/outbox/bulk-send-again/"])
def test_anonymous_is_sent_to_log_in(client, url):
    assert client.post(url, {})["Location"].startswith("/accounts/login/")


def test_a_bad_filter_is_a_400(operator_client):
    assert operator_client.get("/events/bulk-reprocess/?since=yesterday").status_code == 400
    assert operator_client.get("/outbox/bulk-send-again/?since=yesterday").status_code == 400


# --- a run's page and its cancellation -------------------------------------------------------

from idemdash.core import bulk_runs  # noqa: E402
from idemdash.core.bulk_runs import BulkRun  # noqa: E402


@pytest.fixture
def run(operator, dead_rows) -> BulkRun:
    return bulk_runs.start("message", OutboxMessage.objects.all(), actor="otto", user=operator)


def test_a_queued_runs_summary_polls_itself_and_offers_cancel_to_operators(operator_client, run):
    html = operator_client.get(f"/bulk/{run.pk}/").content.decode()
    assert 'data-status="queued"' in html and 'hx-trigger="every 2s"' in html
    assert "Requeued 0 of 2</strong>; 2 still to do" in html
    assert f'action="/bulk/{run.pk}/cancel/?"' in html
    fragment = operator_client.get(f"/bulk/{run.pk}/", headers={"HX-Request": "true"}).content.decode()
    assert 'id="bulk-run"' in fragment and "<html" not in fragment


def test_the_summary_says_sent_n_of_m_once_the_drain_sent_them_and_stops_polling(operator_client, run):
    from receipts.outbox import drain

    bulk_runs.advance(run.pk)
    assert "Since then: " in operator_client.get(f"/bulk/{run.pk}/").content.decode()
    # m1 posts to a loopback address the fence refuses (a permanent failure): it dies again;
    # m2 is an email, which the test mail backend takes.
    drain.drain(max_seconds=10)
    html = operator_client.get(f"/bulk/{run.pk}/").content.decode()
    assert dict(OutboxMessage.objects.filter(key__in=["m1", "m2"]).values_list("key", "status")) == {
        "m1": "dead", "m2": "sent"}
    assert '<span class="badge badge-sent">sent</span> 1 of 2, <span class="badge badge-dead">dead</span> 1' in html
    assert 'data-over="true"' in html and "every row has settled" in html
    assert '<span class="badge badge-finished" data-role="run-badge">finished</span>' in html
    assert 'hx-trigger="every 2s"' not in html


def test_a_viewer_sees_a_run_but_cancelling_is_403_and_changes_nothing(viewer_client, run):
    assert viewer_client.get(f"/bulk/{run.pk}/").status_code == 200
    assert "Cancel the run" not in viewer_client.get(f"/bulk/{run.pk}/").content.decode()
    assert viewer_client.post(f"/bulk/{run.pk}/cancel/").status_code == 403
    assert BulkRun.objects.get(pk=run.pk).status == "queued"
    assert not AuditEntry.objects.filter(action="bulk_run.cancel").exists()


def test_cancelling_needs_the_csrf_token(operator, run):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post(f"/bulk/{run.pk}/cancel/").status_code == 403
    assert BulkRun.objects.get(pk=run.pk).status == "queued"


def test_cancelling_twice_cancels_once_and_is_audited_once(operator_client, run):
    first = operator_client.post(f"/bulk/{run.pk}/cancel/", follow=True).content.decode()
    second = operator_client.post(f"/bulk/{run.pk}/cancel/", follow=True).content.decode()
    assert "Cancelled: items already started finish" in first and 'data-status="cancelled"' in first
    assert "This run is cancelled: nothing to cancel." in second
    assert AuditEntry.objects.filter(action="bulk_run.cancel", actor="otto").count() == 1
    assert "Cancelled by otto: 2 not touched" in second
    assert bulk_runs.advance(run.pk) == 0 and OutboxMessage.objects.filter(status="dead").count() == 2


def test_cancelling_a_run_that_does_not_exist_is_404(operator_client):
    assert operator_client.post("/bulk/999999/cancel/").status_code == 404
    assert operator_client.get("/bulk/999999/").status_code == 404


def test_each_rows_attempt_timeline_marks_the_operators_action_in_the_run(operator_client, run):
    from receipts.outbox import drain

    bulk_runs.advance(run.pk)
    drain.drain(max_seconds=10)
    m2 = OutboxMessage.objects.get(key="m2")
    html = operator_client.get(f"/outbox/{m2.pk}/").content.decode()
    log = html.split('id="outboxmessage-attempts"')[1].split("</section>")[0]
    # The attempt that died, then the operator's send again, then the new attempt #1 that was sent.
    assert log.index("#1 dead") < log.index('data-role="operator-mark"') < log.index("#1 sent")
    mark = log.split('data-role="operator-mark"')[1].split("</li>")[0]
    assert "Send again" in mark and "<strong>otto</strong>" in mark and f'href="/bulk/{run.pk}/"' in mark
    assert "numbering starts again at #1" in mark
