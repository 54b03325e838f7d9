"""receipts.store.release_many: the bulk retry behind the dashboard's Bulk retry page."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.utils import timezone

from receipts import store
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt

pytestmark = pytest.mark.django_db

SCOPE = "client:bulk"


def failed(key: str, *, retryable: bool = True) -> Receipt:
    claim = store.claim(SCOPE, key, "email.send", {"k": key})
    store.fail(store.Held(SCOPE, key, claim.token), error="smtp down", retryable=retryable)
    return Receipt.objects.get(key=key)


def test_it_releases_every_failed_receipt_with_an_audit_entry_each():
    for key in ("a", "b", "c"):
        failed(key, retryable=False)
    result = store.release_many(Receipt.objects.all(), actor="ops", reason="bulk")
    assert (result.done, result.skipped) == (3, 0)
    assert set(Receipt.objects.values_list("retryable", flat=True)) == {True}
    assert AuditEntry.objects.filter(action="receipt.release", actor="ops").count() == 3
    assert Attempt.objects.filter(outcome="released").count() == 3


def test_it_leaves_processing_and_completed_receipts_alone():
    failed("f")
    store.claim(SCOPE, "p", "email.send", {})
    done = store.claim(SCOPE, "d", "email.send", {})
    store.complete(store.Held(SCOPE, "d", done.token), response_status=200)
    result = store.release_many(Receipt.objects.all(), actor="ops")
    assert result.done == 1
    assert dict(Receipt.objects.values_list("key", "status")) == {
        "f": "failed", "p": "processing", "d": "completed"
    }


def test_it_skips_a_receipt_that_changed_after_it_was_read(monkeypatch):
    failed("x")
    failed("y")
    raced = []

    def now_after_the_callers_retry():
        # The bulk action has read the rows; as it starts on the first (x, in id order), the
        # caller's retry wins the race for that key. (release reads the clock first.)
        if not raced:
            raced.append("x")
            store.claim(SCOPE, "x", "email.send", {"k": "x"})
        return timezone.now()

    monkeypatch.setattr(store, "timezone", SimpleNamespace(now=now_after_the_callers_retry))
    result = store.release_many(Receipt.objects.all(), actor="ops")
    assert (result.done, result.skipped) == (1, 1)
    assert Receipt.objects.get(key="x").status == "processing"


def test_it_stops_at_the_limit():
    for key in ("a", "b", "c"):
        failed(key, retryable=False)
    assert store.release_many(Receipt.objects.all(), actor="ops", limit=2).done == 2
    assert Receipt.objects.filter(retryable=False).count() == 1
