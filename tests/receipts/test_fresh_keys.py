"""Retries under a fresh key (receipts/fresh_keys.py): the same caller's same request under a
new key within the window is counted under "allow", and refused under "refuse" (409
fresh-key-retry naming the first key) at every front door: the decorator, the JSON API and
run_once. Of copies racing under new keys, exactly one runs (threads with their own
connections, on the test database)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from idemdash.core.clients import create_token
from idemdash.core.models import AuditEntry
from idemdash_client.errors import FreshKeyRetry
from receipts import fresh_keys, retention, run_once, store
from receipts.conf import policy_for, rule_problems
from receipts.models import Attempt, FirstKey, Receipt
from tests.concurrently import in_threads

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.receipts.urls")]

Outcome = Attempt.Outcome
REFUND = {"order": 7, "amount": 1200}


@pytest.fixture
def refusing(settings):
    settings.RECEIPTS_OPERATIONS = {"refund.*": {"fresh_key": "refuse"}, "payment.capture": {"fresh_key": "refuse"}}


def test_by_default_the_same_request_under_a_new_key_runs_and_is_counted_on_both_receipts():
    since = timezone.now()
    first = store.claim("alice", "k1", "refund.create", REFUND)
    second = store.claim("alice", "k2", "refund.create", REFUND)
    assert (first.outcome, second.outcome) == (Outcome.CLAIMED, Outcome.CLAIMED)
    assert fresh_keys.counts(since) == {"refund.create": {"allowed": 1, "refused": 0}}
    [retry] = fresh_keys.retries(since)
    assert (retry["key"], retry["receipt_id"], retry["first_key"], retry["first_receipt_id"], retry["refused"]) == (
        "k2", second.receipt.pk, "k1", first.receipt.pk, False)
    [later] = fresh_keys.same_request(first.receipt)
    [earlier] = fresh_keys.same_request(second.receipt)
    assert (later["key"], earlier["key"]) == ("k2", "k1")
    assert (later["earlier"], earlier["earlier"]) == (False, True) and later["seconds"] == earlier["seconds"]
    assert (later["receipt_id"], earlier["receipt_id"]) == (second.receipt.pk, first.receipt.pk)
    assert not FirstKey.objects.exists()  # "allow" writes nothing for it


def test_another_request_another_caller_another_operation_or_a_later_one_is_no_retry(settings):
    settings.RECEIPTS_FRESH_KEY_WINDOW_SECONDS = 60
    since = timezone.now()
    store.claim("alice", "k1", "refund.create", REFUND)
    store.claim("alice", "k2", "refund.create", {**REFUND, "amount": 1300})
    store.claim("bob", "k3", "refund.create", REFUND)
    store.claim("alice", "k4", "refund.void", REFUND)
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        store.claim("alice", "k5", "refund.create", REFUND)
        assert fresh_keys.counts(since) == {}


def test_under_refuse_the_new_key_is_answered_with_the_first_one_and_nothing_runs(refusing):
    since = timezone.now()
    first = store.claim("alice", "k1", "refund.create", REFUND)
    again = store.claim("alice", "k2", "refund.create", REFUND)
    assert again.outcome == Outcome.FRESH_KEY_RETRY and not again.owned
    assert again.receipt.pk == first.receipt.pk
    assert not Receipt.objects.filter(key="k2").exists()
    line = Attempt.objects.get(outcome=Outcome.FRESH_KEY_RETRY)
    assert (line.receipt_id, line.key, line.detail) == (first.receipt.pk, "k2", "the same request as the key 'k1'")
    [retry] = fresh_keys.retries(since)
    assert (retry["key"], retry["first_key"], retry["first_receipt_id"], retry["refused"]) == (
        "k2", "k1", first.receipt.pk, True)
    assert fresh_keys.counts(since) == {"refund.create": {"allowed": 0, "refused": 1}}
    # The first key itself decides as always: in progress, then its replay.
    assert store.claim("alice", "k1", "refund.create", REFUND).outcome == Outcome.IN_PROGRESS
    store.complete(first.held, body="refunded")
    assert store.claim("alice", "k1", "refund.create", REFUND).outcome == Outcome.REPLAYED


def test_under_refuse_other_requests_callers_and_a_retry_after_the_window_run(refusing, settings):
    settings.RECEIPTS_FRESH_KEY_WINDOW_SECONDS = 60
    store.claim("alice", "k1", "refund.create", REFUND)
    assert store.claim("alice", "k2", "refund.create", {**REFUND, "amount": 1}).owned
    assert store.claim("bob", "k1", "refund.create", REFUND).owned
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        assert store.claim("alice", "k3", "refund.create", REFUND).owned
        # k3 is now the request's first key: a copy under k4 is refused with it.
        refused = store.claim("alice", "k4", "refund.create", REFUND)
    assert (refused.outcome, refused.receipt.key) == (Outcome.FRESH_KEY_RETRY, "k3")


def test_under_refuse_a_first_key_whose_receipt_is_gone_gives_way(refusing):
    first = store.claim("alice", "k1", "refund.create", REFUND)
    Receipt.objects.filter(pk=first.receipt.pk).delete()
    assert store.claim("alice", "k2", "refund.create", REFUND).owned
    assert FirstKey.objects.get().key == "k2"


@pytest.mark.django_db(transaction=True)
def test_copies_racing_under_new_keys_run_once(refusing):
    copies = 8
    outcomes: list[str] = []

    def copy(i: int) -> None:
        result = store.claim("alice", f"k{i}", "refund.create", REFUND)
        outcomes.append(result.outcome)
        if result.owned:
            store.complete(result.held, body="refunded")

    in_threads(copies, copy)
    assert sorted(outcomes) == [Outcome.CLAIMED] + [Outcome.FRESH_KEY_RETRY] * (copies - 1)
    assert Receipt.objects.count() == 1 and FirstKey.objects.count() == 1


def test_the_decorator_answers_409_fresh_key_retry_naming_the_first_key(client, refusing):
    body = json.dumps(REFUND)
    first = client.post("/capture", body, content_type="application/json", headers={"Idempotency-Key": "k1"})
    again = client.post("/capture", body, content_type="application/json", headers={"Idempotency-Key": "k2"})
    assert first.status_code == 201 and again.status_code == 409
    assert again["Content-Type"] == "application/problem+json"
    problem = again.json()
    assert problem["type"] == "urn:idemdash:problem:fresh-key-retry" and problem["first_key"] == "k1"
    assert problem["first_seen_at"] == Receipt.objects.get(key="k1").created_at.isoformat()
    assert "Idempotency-Key-Expires" not in again and "Retry-After" not in again
    assert AuditEntry.objects.count() == 1  # the view ran once
    replay = client.post("/capture", body, content_type="application/json", headers={"Idempotency-Key": "k1"})
    assert replay.status_code == 201 and replay.json() == first.json()


def test_the_json_api_answers_409_fresh_key_retry(client, refusing):
    token = create_token("worker")[1]

    def claim(key: str):
        return client.post("/api/v1/receipts/claim", {"key": key, "operation": "refund.create", "request": REFUND},
                           content_type="application/json", headers={"Authorization": f"Bearer {token}"})

    assert claim("k1").status_code == 201
    refused = claim("k2")
    assert refused.status_code == 409 and refused.json()["first_key"] == "k1"


def test_run_once_raises_fresh_key_retry(refusing):
    ran = []
    run_once("k1", "refund.create", ran.append, 1, request=REFUND)
    with pytest.raises(FreshKeyRetry) as caught:
        run_once("k2", "refund.create", ran.append, 2, request=REFUND)
    assert ran == [1] and caught.value.first_key == "k1" and caught.value.status == 409


def test_the_policy_says_allow_or_refuse_and_nothing_else(settings):
    assert policy_for("email.send").fresh_key == "allow"
    assert rule_problems("refund.*", {"fresh_key": "never"}) == [
        "RECEIPTS_OPERATIONS['refund.*']['fresh_key'] must be 'allow' or 'refuse', got 'never'"]
    settings.RECEIPTS_OPERATIONS = {"refund.*": {"fresh_key": "never"}}
    with pytest.raises(ImproperlyConfigured):
        policy_for("refund.create")


def test_first_keys_past_the_window_are_purged(refusing, settings):
    settings.RECEIPTS_FRESH_KEY_WINDOW_SECONDS = 60
    store.claim("alice", "k1", "refund.create", REFUND)
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        store.claim("alice", "k9", "refund.create", {"other": True})
        assert fresh_keys.due_first_keys(timezone.now()).count() == 1
        retention.purge()
    assert list(FirstKey.objects.values_list("key", flat=True)) == ["k9"]
