from __future__ import annotations

import json
import multiprocessing
import os
import random
import threading
from collections import Counter
from pathlib import Path

import pytest
from django.db import ProgrammingError, connection, connections, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext

from idemdash.core.models import AuditEntry
from tests.webhooks.conftest import STRIPE_SECRET, make_endpoint, queued_event_ids, stripe_event, stripe_headers
from webhooks import processing
from webhooks.models import RejectedDelivery, RejectionCount, WebhookDelivery, WebhookEvent
from webhooks.receive import record_rejection, store_delivery
from webhooks.verify import VerifiedDelivery

PROCESSES = 4
THREADS = 4


def verified(key: str, payload: dict) -> VerifiedDelivery:
    return VerifiedDelivery(0, payload, key, "a.b", key, "")


@pytest.mark.django_db
def test_the_first_delivery_inserts_and_the_next_ones_count():
    endpoint = make_endpoint("ep", "stripe", STRIPE_SECRET)
    first = store_delivery(endpoint, verified("evt_1", {"id": "evt_1"}))
    second = store_delivery(endpoint, verified("evt_1", {"id": "evt_1"}))
    assert first.created and not second.created
    assert second.event.pk == first.event.pk and second.event.delivery_count == 2
    assert second.event.last_delivery_at >= first.event.received_at


@pytest.mark.django_db(transaction=True)
def test_a_delivery_and_its_task_commit_together_or_not_at_all():
    endpoint = make_endpoint("ep", "stripe", STRIPE_SECRET)
    with pytest.raises(RuntimeError), transaction.atomic():
        store_delivery(endpoint, verified("evt_gone", {"id": "evt_gone"}))
        raise RuntimeError("the caller's transaction fails after the store")
    assert not WebhookEvent.objects.exists() and queued_event_ids() == []
    stored = store_delivery(endpoint, verified("evt_kept", {"id": "evt_kept"}))
    assert queued_event_ids() == [stored.event_id]
    # The payload and every counter are as stored, whichever path (SQL or ORM) stored them.
    event = WebhookEvent.objects.get()
    assert (event.payload, event.status, event.delivery_count, event.enqueued_at) == (
        {"id": "evt_kept"}, "received", 1, event.received_at
    )
    assert WebhookDelivery.objects.get().event_id == event.pk


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_a_delivery_is_one_statement_that_holds_its_task():
    """No BEGIN, no separate task INSERT, no COMMIT: the statement is atomic on its own."""
    endpoint = make_endpoint("ep", "stripe", STRIPE_SECRET)
    with CaptureQueriesContext(connection) as new:
        first = store_delivery(endpoint, verified("evt_1", {"id": "evt_1"}))
    with CaptureQueriesContext(connection) as duplicate:
        store_delivery(endpoint, verified("evt_1", {"id": "evt_1"}))
    assert (len(new.captured_queries), len(duplicate.captured_queries)) == (1, 1)
    assert queued_event_ids() == [first.event_id]  # the duplicate wrote no task


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_a_persistent_connection_the_delivery_statement_is_prepared(monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 60)
    endpoint = make_endpoint("ep", "stripe", STRIPE_SECRET)
    first = store_delivery(endpoint, verified("evt_p", {"id": "evt_p"}))
    again = store_delivery(endpoint, verified("evt_p", {"id": "evt_p"}))
    assert (first.created, again.created, again.delivery_count) == (True, False, 2)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any(WebhookDelivery._meta.db_table in s for s in prepared)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_on_postgresql_an_event_whose_task_cannot_be_written_is_not_stored():
    endpoint = make_endpoint("ep", "stripe", STRIPE_SECRET)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION idemdash_test_no_task() RETURNS trigger AS $$ "
            "BEGIN RAISE EXCEPTION 'no task today'; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            "CREATE TRIGGER idemdash_test_no_task BEFORE INSERT ON django_q_ormq "
            "FOR EACH ROW EXECUTE FUNCTION idemdash_test_no_task()"
        )
    try:
        with pytest.raises(ProgrammingError):
            store_delivery(endpoint, verified("evt_1", {"id": "evt_1"}))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER idemdash_test_no_task ON django_q_ormq")
            cursor.execute("DROP FUNCTION idemdash_test_no_task()")
    assert not WebhookEvent.objects.exists() and not WebhookDelivery.objects.exists()


@pytest.mark.django_db
def test_a_redelivery_with_another_payload_is_flagged_on_the_event_and_the_delivery():
    endpoint = make_endpoint("ep", "stripe", STRIPE_SECRET)
    store_delivery(endpoint, verified("evt_1", {"amount": 1}))
    same = store_delivery(endpoint, verified("evt_1", {"amount": 1}))
    other = store_delivery(endpoint, verified("evt_1", {"amount": 2}))
    assert (same.payload_matches, other.payload_matches) == (True, False)
    event = WebhookEvent.objects.get()
    assert event.payload_mismatch and event.delivery_count == 3 and event.payload == {"amount": 1}
    assert list(WebhookDelivery.objects.order_by("id").values_list("duplicate", "payload_matches")) == [
        (False, True), (True, True), (True, False)
    ]


@pytest.mark.django_db
def test_the_same_key_on_two_endpoints_is_two_events():
    a = make_endpoint("a", "stripe", STRIPE_SECRET)
    b = make_endpoint("b", "stripe", STRIPE_SECRET)
    store_delivery(a, verified("evt_1", {}))
    store_delivery(b, verified("evt_1", {}))
    assert WebhookEvent.objects.count() == 2


@pytest.mark.django_db
def test_a_rejection_keeps_a_printable_excerpt_only():
    rejection = record_rejection(None, "stripe", "invalid_json", "bad", b"\x00\x01abc\xff" + b"z" * 10_000)
    assert rejection.body_size == 10_006
    assert len(rejection.body_excerpt) == 256
    assert rejection.body_excerpt.startswith("  abc")


@pytest.mark.django_db
def test_every_rejection_is_counted_by_cause_even_past_the_tables_cap(settings):
    settings.WEBHOOKS_REJECTED_MAX_ROWS = 2
    for _ in range(5):
        record_rejection(None, "stripe", "no_matching_signature", "bad", b"{}")
    record_rejection(None, "stripe", "stale_timestamp", "late", b"{}")
    assert RejectedDelivery.objects.count() == 2  # the cap trimmed the table ...
    counted = dict(RejectionCount.objects.filter(count__gt=0).values_list("cause", "count"))
    assert counted == {"no_matching_signature": 5, "stale_timestamp": 1}  # ... not the count


@pytest.mark.django_db(transaction=True)
def test_concurrent_rejections_of_one_cause_are_each_counted_once():
    """Threads with their own connections add to the cause's row at once. Its row removed
    first (the migration makes one per cause), so their first rejections also race to insert
    it: the unique cause settles that, and on MariaDB, where that race deadlocks, the
    rejection's deadlock retry; the UPDATE's row lock settles the additions."""
    RejectionCount.objects.all().delete()
    threads, each = 6, 5
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def reject() -> None:
        try:
            barrier.wait()
            for _ in range(each):
                record_rejection(None, "stripe", "missing_header", "none", b"{}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    running = [threading.Thread(target=reject) for _ in range(threads)]
    for t in running:
        t.start()
    for t in running:
        t.join()
    assert not errors, errors
    assert RejectionCount.objects.get(cause="missing_header").count == threads * each


def _storm_worker(slug: str, deliveries: list[tuple[int, bytes]], results) -> None:
    """One OS process: several threads, each with its own connection, delivering its share
    and then trying to process the event at once, like a worker racing the others."""
    statuses: Counter = Counter()
    lock = threading.Lock()

    def run(share: list[tuple[int, bytes]]) -> None:
        client = Client()
        try:
            for _, body in share:
                # Signed at send time, as Stripe signs each retry anew: same body, new header.
                headers = stripe_headers(body, STRIPE_SECRET)
                response = client.post(f"/webhooks/{slug}/", data=body, content_type="application/json", headers=headers)
                with lock:
                    statuses[response.status_code] += 1
                if response.status_code == 200:
                    processing.process_event(response.json()["event"])
        finally:
            connection.close()

    try:
        threads = [threading.Thread(target=run, args=(deliveries[n::THREADS],)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        results.put(dict(statuses))  # always, so the parent never waits for a dead child


def run_storm(tmp_path: Path, registry, events: int, repeats: int) -> None:
    runs_file = tmp_path / "handler-runs.log"

    def handle(event: WebhookEvent) -> None:
        # Two witnesses: a file line per run (even a run that rolled back), and a row.
        fd = os.open(runs_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, f"{event.pk}\n".encode())
        finally:
            os.close(fd)
        AuditEntry.objects.create(created_at=event.received_at, actor="handler", action="storm", object_type="e", object_id=str(event.pk))

    registry("stripe", "storm.event", handle)
    make_endpoint("storm", "stripe", STRIPE_SECRET)
    deliveries = []
    for n in range(events):
        body = json.dumps(stripe_event({"id": f"pi_{n}", "object": "payment_intent"}, "storm.event", event_id=f"evt_storm_{n}")).encode()
        deliveries.extend([(n, body)] * repeats)
    random.Random(20240601).shuffle(deliveries)

    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_storm_worker, args=("storm", deliveries[p::PROCESSES], results)) for p in range(PROCESSES)]
    for p in procs:
        p.start()
    statuses: Counter = Counter()
    for _ in procs:
        statuses.update(results.get(timeout=270))
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0

    assert statuses == {200: events * repeats}
    assert WebhookEvent.objects.count() == events
    assert set(WebhookEvent.objects.values_list("delivery_count", flat=True)) == {repeats}
    assert WebhookDelivery.objects.count() == events * repeats
    assert WebhookDelivery.objects.filter(duplicate=False).count() == events
    assert set(WebhookEvent.objects.values_list("status", flat=True)) == {"completed"}, list(WebhookEvent.objects.exclude(status="completed").values_list("last_error", flat=True))
    runs = Counter(runs_file.read_text().split())
    assert len(runs) == events and set(runs.values()) == {1}
    assert AuditEntry.objects.filter(action="storm").count() == events
    assert not RejectedDelivery.objects.exists()


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_retry_storm_stores_each_event_once_counts_every_delivery_and_runs_each_handler_once(tmp_path, registry):
    """200 events delivered 10 times each, shuffled, from 4 processes x 4 threads."""
    run_storm(tmp_path, registry, events=200, repeats=10)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_small_retry_storm_holds_on_either_database(tmp_path, registry):
    run_storm(tmp_path, registry, events=20, repeats=5)
