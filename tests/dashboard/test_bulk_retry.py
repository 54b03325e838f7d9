"""Bulk release of failed receipts (/receipts/bulk-release/): preview, confirmation, summary."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from receipts import store
from idemdash.core.models import AuditEntry
from receipts.models import Receipt
from tests.dashboard.build import completed, confirm_bulk, failed

pytestmark = pytest.mark.django_db


@pytest.fixture
def receipts():
    failed("pay-1", "payment.create", retryable=False)
    failed("pay-2", "payment.create", retryable=False)
    failed("mail-1", "email.send", retryable=False)
    completed("pay-3", "payment.create")


def test_the_preview_names_the_rows_and_the_filter_in_the_forms_words(operator_client, receipts):
    html = operator_client.get("/receipts/bulk-release/?operation=payment.create&q=pay").content.decode()
    assert 'data-count="2"' in html and "Release 2 failed receipts" in html
    first = re.findall(r'<li><a href="/receipts/(\d+)/"><code>([^<]+)</code>', html)
    assert [key for _, key in first] == ["pay-1", "pay-2"]
    assert "<dt>Operation</dt><dd>payment.create</dd>" in html and "<dt>Key starts with</dt><dd>pay</dd>" in html
    assert "<dt>Status</dt><dd>Failed</dd>" in html
    assert "<dt>q</dt>" not in html and "<dt>status</dt>" not in html
    assert not AuditEntry.objects.exists()  # the preview changes nothing


def test_the_preview_shows_the_first_ten_of_many(operator_client):
    for i in range(12):
        failed(f"k-{i:02d}")
    html = operator_client.get("/receipts/bulk-release/").content.decode()
    assert 'data-count="12"' in html and "The first 10 of 12 it touches" in html
    assert html.count('<li><a href="/receipts/') == 10 and "k-09" in html and "k-10" not in html


def test_confirming_releases_exactly_the_previewed_rows_and_summarises(operator_client, receipts):
    run, html = confirm_bulk(
        operator_client, "/receipts/bulk-release/",
        {"operation": "payment.create", "status": "failed", "expected": "2", "reason": "outage over"},
    )
    released = {r.key for r in Receipt.objects.all() if r.released}
    assert released == {"pay-1", "pay-2"}
    assert Receipt.objects.get(key="mail-1").retryable is False
    # A release is its own outcome: the run is over as soon as every row is released.
    assert 'data-over="true" data-done="2" data-settled="2"' in html and "Released 2 of 2" in html
    assert "hx-trigger" not in html.split('id="bulk-run"')[1].split(">")[0]
    audit_url = re.search(r'href="(/audit/\?[^"]+)"', html).group(1).replace("&amp;", "&")
    audit = operator_client.get(audit_url).content.decode()
    assert len(re.findall(r'href="/receipts/\d+/"', audit)) == 2 and "outage over" in audit
    assert f"bulk run <strong>{run.pk}</strong>" in audit
    # A second run finds nothing: released receipts are no longer failed ones.
    assert "Nothing to release" in operator_client.get("/receipts/bulk-release/?operation=payment.create").content.decode()


def test_the_audit_link_shows_only_this_runs_entries(operator_client, receipts):
    store.release(Receipt.objects.get(key="mail-1"), actor="otto", reason="earlier, by hand")
    _, html = confirm_bulk(operator_client, "/receipts/bulk-release/", {"operation": "payment.create"})
    audit_url = re.search(r'href="(/audit/\?[^"]+)"', html).group(1).replace("&amp;", "&")
    audit = operator_client.get(audit_url).content.decode()
    assert "earlier, by hand" not in audit and len(re.findall(r'href="/receipts/\d+/"', audit)) == 2


def test_a_count_that_changed_since_the_preview_is_said(operator_client, receipts):
    _, html = confirm_bulk(operator_client, "/receipts/bulk-release/", {"operation": "payment.create", "expected": "3"})
    assert "The preview counted 3; 2 matched when you confirmed." in html


def test_nothing_to_release_says_so(operator_client, receipts):
    html = operator_client.get("/receipts/bulk-release/?operation=refund.create").content.decode()
    assert "Nothing to release" in html


def test_a_viewer_sees_the_preview_but_a_post_is_403(viewer_client, receipts):
    html = viewer_client.get("/receipts/bulk-release/").content.decode()
    assert 'data-count="3"' in html and "Only operators" in html and 'class="confirm-form"' not in html
    assert viewer_client.post("/receipts/bulk-release/", {}).status_code == 403
    assert not AuditEntry.objects.exists()


def test_bulk_release_needs_the_csrf_token(operator, receipts):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post("/receipts/bulk-release/", {}).status_code == 403
    assert not AuditEntry.objects.exists()


def test_a_bad_filter_is_a_400_in_the_forms_words(operator_client):
    response = operator_client.get("/receipts/bulk-release/?since=yesterday")
    assert response.status_code == 400 and "Created from: " in response.content.decode()
    assert "since:" not in response.content.decode()


def test_the_audit_log_shows_a_run_as_one_entry_with_its_items_grouped_under_it(operator_client, receipts):
    run, _ = confirm_bulk(operator_client, "/receipts/bulk-release/", {"operation": "payment.create", "reason": "outage"})
    assert AuditEntry.objects.filter(run=run).count() == 2
    log = operator_client.get("/audit/").content.decode()
    assert log.count("<tr>") - 1 == 1  # the run's entry only, under the table's head
    assert f'href="/bulk/{run.pk}/" title="Release 2 failed receipts">Release 2 failed receipts</a>' in log
    assert f'href="/audit/?run={run.pk}">2 item entries</a>' in log
    items = operator_client.get(f"/audit/?run={run.pk}").content.decode()
    assert len(re.findall(r'href="/receipts/\d+/"', items)) == 2 and f'in bulk run {run.pk}</a>' in items
    # Looking for one object finds its entry from the run too.
    assert "pay-1</a>" in operator_client.get("/audit/?object=pay-1").content.decode()
