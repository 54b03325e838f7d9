from __future__ import annotations

import pytest
from django.test import Client

from receipts.models import AuditEntry, Receipt
from tests.dashboard.build import completed, failed

pytestmark = pytest.mark.django_db


@pytest.fixture
def receipts():
    failed("pay-1", "payment.create", retryable=False)
    failed("pay-2", "payment.create", retryable=False)
    failed("mail-1", "email.send", retryable=False)
    completed("pay-3", "payment.create")


def test_the_preview_counts_the_failed_receipts_the_filter_matches(operator_client, receipts):
    html = operator_client.get("/receipts/bulk-retry/?operation=payment.create").content.decode()
    assert 'data-count="2"' in html and "Release 2 receipts" in html
    assert not AuditEntry.objects.exists()  # the preview changes nothing


def test_confirming_releases_exactly_the_previewed_rows(operator_client, receipts):
    response = operator_client.post("/receipts/bulk-retry/", {"operation": "payment.create", "status": "failed"})
    assert response.status_code == 302
    assert response["Location"].startswith("/receipts/?") and "operation=payment.create" in response["Location"]
    retryable = dict(Receipt.objects.values_list("key", "retryable"))
    assert retryable == {"pay-1": True, "pay-2": True, "mail-1": False, "pay-3": True}
    assert AuditEntry.objects.filter(action="receipt.release", actor="otto").count() == 2
    follow = operator_client.get(response["Location"]).content.decode()
    assert "Bulk retry released 2 failed receipt(s)." in follow


def test_nothing_to_retry_says_so(operator_client, receipts):
    html = operator_client.get("/receipts/bulk-retry/?operation=refund.create").content.decode()
    assert "Nothing to retry" in html


def test_a_viewer_sees_the_preview_but_a_post_is_403(viewer_client, receipts):
    html = viewer_client.get("/receipts/bulk-retry/").content.decode()
    assert 'data-count="3"' in html and "Only operators" in html and "/receipts/bulk-retry/\" class=\"confirm-form\"" not in html
    assert viewer_client.post("/receipts/bulk-retry/", {}).status_code == 403
    assert not AuditEntry.objects.exists()


def test_bulk_retry_needs_the_csrf_token(operator, receipts):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post("/receipts/bulk-retry/", {}).status_code == 403
    assert not AuditEntry.objects.exists()


def test_a_bad_filter_is_a_400(operator_client):
    assert operator_client.get("/receipts/bulk-retry/?since=yesterday").status_code == 400
