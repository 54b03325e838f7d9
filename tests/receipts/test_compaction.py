"""receipts/compaction.py: completed receipts past their operation's `compact_after_seconds`
lose their request and response body, keep the rest until they expire, and a repeat of the
key answers 410 receipt-compacted through every front door (the decorator, the JSON API, the
in-process API). Races: compaction against replays and against claims that start a new life
on an expired key, from threads of forked processes, each with its own connection, on the
real database."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
import time_machine
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import receipts
from idemdash.core.clients import create_token
from idemdash.devtools.bench.servers import process_table
from receipts import compaction, responses, store
from receipts.models import Attempt, Receipt, ReceiptReference
from tests.concurrently import in_a_thread, in_threads_of_forked_processes
from tests.waits import until

SCOPE = "client:test"
HOUR = 3600
POLICIES = {
    "export.run": {"ttl_seconds": 7 * 86400, "compact_after_seconds": HOUR},
    "email.send": {"compact_after_seconds": HOUR},
    "payment.capture": {"compact_after_seconds": HOUR},  # financial: 7 days
}


@pytest.fixture(autouse=True)
def policies(settings):
    settings.RECEIPTS_OPERATIONS = POLICIES


def completed(key: str, operation: str = "export.run", *, age: timedelta = timedelta(hours=2), status: int = 201) -> Receipt:
    with time_machine.travel(timezone.now() - age, tick=False):
        claim = store.claim(SCOPE, key, operation, {"order": key, "lines": [1, 2, 3]})
        store.complete(store.Held(SCOPE, key, claim.token), response_status=status, content_type="application/json",
            body=json.dumps({"export": key}), references=[("order", key)],
        )
    return Receipt.objects.get(scope=SCOPE, key=key)


def fields(receipt: Receipt) -> tuple:
    """What compaction must keep."""
    return (
        receipt.scope, receipt.key, receipt.operation, receipt.fingerprint, receipt.status, receipt.retryable,
        receipt.response_status, receipt.response_content_type, receipt.error, receipt.attempts,
        receipt.fencing_token, receipt.created_at, receipt.completed_at, receipt.expires_at,
    )


@pytest.mark.django_db
def test_a_completed_receipt_past_its_window_loses_its_bodies_and_keeps_the_rest():
    before = completed("exp-1")
    (result,) = compaction.compact()
    assert (result.operation, result.compacted, result.batches) == ("export.run", 1, 1)
    after = Receipt.objects.get(pk=before.pk)
    assert (after.request, after.response_body) == (None, "")
    assert after.compacted_at is not None and fields(after) == fields(before)
    assert list(ReceiptReference.objects.filter(receipt=after).values_list("kind", "value")) == [("order", "exp-1")]
    assert compaction.compact() == []  # it left the index: nothing more to do


@pytest.mark.django_db
def test_receipts_inside_their_window_failed_ones_and_operations_without_a_window_are_kept(settings):
    young = completed("young", age=timedelta(minutes=30))
    other = completed("other", "report.build")  # no compact_after_seconds
    with time_machine.travel(timezone.now() - timedelta(hours=2), tick=False):
        claim = store.claim(SCOPE, "broken", "export.run", {"order": "broken"})
        store.fail(store.Held(SCOPE, "broken", claim.token), error="boom", retryable=False)
    assert [r.compacted for r in compaction.compact()] == [0]  # export.run looked at; nothing due
    for kept in (young, other, Receipt.objects.get(key="broken")):
        fresh = Receipt.objects.get(pk=kept.pk)
        assert fresh.compacted_at is None and fresh.request is not None


@pytest.mark.django_db
def test_each_batch_is_bounded_and_its_own_transaction():
    for n in range(25):
        completed(f"exp-{n:02d}")
    with CaptureQueriesContext(connection) as queries:
        (result,) = compaction.compact(batch_size=10)
    assert (result.compacted, result.batches) == (25, 3)
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 3
    assert Receipt.objects.filter(compacted_at=None).count() == 0
    completed("more")
    assert compaction.compact(batch_size=1, max_batches=1)[0].compacted == 1


# --- what a repeat of the key answers ---------------------------------------------------------


def assert_compacted_problem(response, original: int) -> dict:
    assert response.status_code == 410 and response["Content-Type"] == "application/problem+json"
    assert response[responses.ORIGINAL_STATUS_HEADER] == str(original)
    problem = response.json()
    assert problem["type"] == "urn:idemdash:problem:receipt-compacted" and problem["status"] == 410
    assert problem["original_status"] == original and problem["compacted_at"]
    return problem


@pytest.mark.django_db
@pytest.mark.urls("tests.receipts.urls")
def test_a_decorated_view_repeated_after_compaction_answers_410_and_does_not_run(client: Client):
    body = json.dumps({"amount": 100})
    first = client.post("/capture", body, content_type="application/json", headers={"Idempotency-Key": "cap-1"})
    assert first.status_code == 201
    compaction.compact(now=timezone.now() + timedelta(hours=2))
    again = client.post("/capture", body, content_type="application/json", headers={"Idempotency-Key": "cap-1"})
    assert_compacted_problem(again, 201)
    from idemdash.core.models import AuditEntry

    assert AuditEntry.objects.filter(action="test.side_effect").count() == 1  # the view ran once
    other = client.post("/capture", json.dumps({"amount": 5}), content_type="application/json",
                        headers={"Idempotency-Key": "cap-1"})
    assert other.status_code == 422  # the fingerprint is kept: a different request is still refused


@pytest.mark.django_db
def test_the_json_api_answers_410_to_the_claim_and_shows_compacted_at_on_lookup(client: Client):
    token = create_token("worker")[1]
    auth = {"Authorization": f"Bearer {token}"}

    def call(path: str, body: dict):
        return client.post(f"/api/v1/receipts/{path}", json.dumps(body), content_type="application/json", headers=auth)

    claim = {"key": "k-1", "operation": "export.run", "request": {"n": 1}}
    token_1 = call("claim", claim).json()["token"]
    assert call("complete", {"key": "k-1", "token": token_1, "response": {"rows": 10}}).status_code == 200
    compaction.compact(now=timezone.now() + timedelta(hours=2))
    assert_compacted_problem(call("claim", claim), 200)
    looked_up = client.get("/api/v1/receipts/?key=k-1", headers=auth).json()
    assert looked_up["compacted_at"] and looked_up["request"] is None and looked_up["response"] is None
    assert looked_up["status"] == "completed" and looked_up["policy"]["compact_after_seconds"] == HOUR
    logged = list(Attempt.objects.filter(key="k-1").order_by("id").values_list("outcome", flat=True))
    assert logged == ["claimed", "completed", "replayed"]


@pytest.mark.django_db
def test_run_once_after_compaction_raises_receipt_compacted_and_does_not_run_the_step():
    calls = []

    def export() -> dict:
        calls.append(1)
        return {"rows": 3}

    assert receipts.run_once("nightly", "export.run", export) == {"rows": 3}
    compaction.compact(now=timezone.now() + timedelta(hours=2))
    with pytest.raises(receipts.ReceiptCompacted) as caught:
        receipts.run_once("nightly", "export.run", export)
    assert len(calls) == 1 and caught.value.status == 410 and caught.value.original_status == 200


@pytest.mark.django_db
def test_an_expired_compacted_key_starts_a_whole_new_life(settings):
    settings.RECEIPTS_OPERATIONS = {"export.run": {"ttl_seconds": 2 * HOUR, "compact_after_seconds": HOUR}}
    old = completed("exp-1", age=timedelta(hours=3))  # compacted, then expired
    compaction.compact(now=timezone.now() - timedelta(minutes=30))
    assert Receipt.objects.get(pk=old.pk).compacted_at is not None
    claim = store.claim(SCOPE, "exp-1", "export.run", {"order": "new"})
    assert claim.outcome == "claimed"
    store.complete(store.Held(SCOPE, "exp-1", claim.token), body='{"new": true}')
    renewed = Receipt.objects.get(pk=old.pk)
    assert renewed.compacted_at is None and renewed.request == {"order": "new"} and renewed.response_body == '{"new": true}'
    assert store.claim(SCOPE, "exp-1", "export.run", {"order": "new"}).outcome == "replayed"


@pytest.mark.django_db
def test_a_compacted_financial_receipt_is_archived_with_its_compaction_time(settings):
    """Its archived copy has no bodies either, and says why rather than look emptied."""
    from idemdash.core import retention as core_retention
    from receipts import retention
    from receipts.models import ArchivedReceipt

    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"ttl_seconds": 2 * HOUR, "compact_after_seconds": HOUR}}
    settings.RECEIPTS_FINANCIAL_OPERATIONS = ["payment.capture"]
    old = completed("pay-1", "payment.capture", age=timedelta(hours=3))  # compacted, then expired
    compaction.compact(now=timezone.now() - timedelta(minutes=30))
    compacted_at = Receipt.objects.get(pk=old.pk).compacted_at
    assert compacted_at is not None
    (result,) = retention.purge(purgers=[p for p in core_retention.installed_purgers() if p.name == "receipts.expired"])
    assert (result.deleted, result.archived) == (1, 1)
    archived = ArchivedReceipt.objects.get()
    assert (archived.original_id, archived.compacted_at, archived.request, archived.response_body) == (
        old.pk, compacted_at, None, "")


# --- races ------------------------------------------------------------------------------------

RACE_KEYS = [f"race-{n:03d}" for n in range(120)]
PROCESSES = 3
THREADS = 3


def _replaying(process: int, thread: int, start: threading.Barrier, out: list) -> None:
    """Replay every key over and over while compaction runs: each answer is either the whole
    stored result or receipt-compacted with the original status, never an empty replay."""
    try:
        start.wait()
        mine = RACE_KEYS[thread::THREADS]
        compacted: set[str] = set()
        # Until every key of this thread was answered compacted: compaction starts only once
        # replays are under way (whole answers first), so both answers are seen, whatever the load.
        deadline = time.monotonic() + 90
        while len(compacted) < len(mine) and time.monotonic() < deadline:
            for key in mine:
                result = store.claim(SCOPE, key, "export.run", {"order": key, "lines": [1, 2, 3]})
                receipt = result.receipt
                if result.outcome != "replayed":
                    out.append(("wrong-outcome", key, result.outcome))
                elif receipt.compacted_at is None:
                    ok = receipt.response_body == json.dumps({"export": key}) and receipt.request is not None
                    out.append(("whole" if ok else "torn", key, None))
                else:
                    refused = responses.refusal(result, responses.RefusalWords("", "", "", ""))
                    ok = refused is not None and refused.status_code == 410 and json.loads(refused.content)["original_status"] == 201
                    out.append(("compacted" if ok and receipt.response_body == "" else "torn", key, None))
                    compacted.add(key)
    finally:
        connections.close_all()


def _forked() -> bool:
    """Every process of the race is forked: a thread of this process may now take locks (a
    fork copies a lock another thread holds, held for ever in the child)."""
    return sum(1 for _, state, parent, _ in process_table() if parent == os.getpid() and state != "Z") >= PROCESSES


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_compaction_racing_replays_from_threads_and_processes_never_answers_a_wrong_status():
    for key in RACE_KEYS:
        completed(key)
    stop = threading.Event()
    runs: list[int] = []

    def compacting() -> None:
        until(lambda: _forked() and Attempt.objects.filter(key__in=RACE_KEYS, outcome="replayed").exists(),
              "the replays under way", within=60)
        while not stop.is_set():
            runs.append(sum(r.compacted for r in compaction.compact(batch_size=7, max_batches=1)))
            time.sleep(0.05)

    with in_a_thread(compacting, stop, join=30):
        seen = in_threads_of_forked_processes(_replaying, THREADS, [(p,) for p in range(PROCESSES)], timeout=120)
    kinds = Counter(kind for kind, _, _ in seen)
    assert set(kinds) <= {"whole", "compacted"}, [s for s in seen if s[0] not in ("whole", "compacted")][:5]
    assert kinds["whole"] and kinds["compacted"], (kinds, runs)  # the race was run: both answers were seen
    # No row lost, each compacted once, and the log counts every replay.
    assert Receipt.objects.filter(key__in=RACE_KEYS).count() == len(RACE_KEYS)
    compaction.compact()
    assert Receipt.objects.filter(key__in=RACE_KEYS, compacted_at=None).count() == 0
    assert sum(runs) + sum(r.compacted for r in compaction.compact()) <= len(RACE_KEYS)
    assert Attempt.objects.filter(key__in=RACE_KEYS, outcome="replayed").count() == len(seen)


def _claiming_new_lives(process: int, thread: int, start: threading.Barrier, out: list) -> None:
    try:
        start.wait()
        until(lambda: Receipt.objects.filter(key__in=RACE_KEYS).exclude(compacted_at=None).exists(),
              "compaction under way", within=60)
        for key in RACE_KEYS[process * THREADS + thread::PROCESSES * THREADS]:
            time.sleep(0.01)
            try:
                result = store.claim(SCOPE, key, "export.run", {"order": key, "life": 2})
                if result.owned:
                    store.complete(store.Held(SCOPE, key, result.token), body=json.dumps({"life": 2}))
                out.append((key, result.outcome))
            except Exception as exc:  # reported, not lost with the thread
                out.append((key, repr(exc)))
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_compaction_racing_claims_of_expired_keys_never_compacts_a_new_life(settings):
    # Forked processes inherit these settings: expired receipts, due for compaction too.
    settings.RECEIPTS_OPERATIONS = {"export.run": {"ttl_seconds": 2 * HOUR, "compact_after_seconds": HOUR}}
    for key in RACE_KEYS:
        completed(key, age=timedelta(hours=3))
    stop = threading.Event()
    runs: list[int] = []

    def compacting() -> None:
        until(_forked, "the claiming processes forked", within=60)
        while not stop.is_set():
            runs.append(sum(r.compacted for r in compaction.compact(batch_size=5, max_batches=1)))
            time.sleep(0.01)  # as a schedule would: SQLite's one writer is not held for ever

    with in_a_thread(compacting, stop, join=30):
        seen = in_threads_of_forked_processes(_claiming_new_lives, THREADS, [(p,) for p in range(PROCESSES)], timeout=120)
    assert Counter(outcome for _, outcome in seen) == {"claimed": len(RACE_KEYS)}
    assert sum(runs) > 0  # compaction ran among the claims (each compacted one was then claimed)
    rows = Receipt.objects.filter(key__in=RACE_KEYS)
    assert rows.count() == len(RACE_KEYS)
    for receipt in rows:  # every new life is whole: compaction never touched one
        assert (receipt.status, receipt.compacted_at, receipt.request, receipt.response_body) == (
            "completed", None, {"order": receipt.key, "life": 2}, json.dumps({"life": 2}),
        )
