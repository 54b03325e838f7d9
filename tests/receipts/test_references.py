"""References and causes on receipts (receipts/references.py, and their storing by
receipts/store.py): attached under a claim with receipts.current().refer, stored with the
attempt's completion or failure and never otherwise, found by value, and the outbox messages
a claim's step enqueued, linked both ways. On a real database, with threads, a forked process
killed mid-step, and the purge."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import receipts
from idemdash.core.leases import StaleToken
from idemdash_client.references import InvalidReference
from receipts import retention, store, waiting
from receipts.models import Receipt, ReceiptReference
from receipts.outbox import store as outbox
from receipts.outbox.models import OutboxMessage
from receipts.references import cause_of, caused_by, objects_referring, referring
from tests.concurrently import in_threads, killed_once_it_reaches
from tests.waits import until

URL = "http://127.0.0.1:9/hook"


def stored(receipt: Receipt | None = None) -> list[tuple[str, str]]:
    rows = ReceiptReference.objects.order_by("pk")
    if receipt is not None:
        rows = rows.filter(receipt=receipt)
    return list(rows.values_list("kind", "value"))


def charge(charge_id: str) -> str:
    receipts.current().refer("stripe.charge", charge_id)
    receipts.current().refer("order", 1042)
    return charge_id


# --- stored with the settle, and only then ---------------------------------------------------------

@pytest.mark.django_db
def test_references_made_under_a_claim_are_stored_with_its_completion():
    assert receipts.run_once("pay:1", "payments.charge", charge, "ch_1") == "ch_1"
    receipt = Receipt.objects.get()
    assert stored(receipt) == [("stripe.charge", "ch_1"), ("order", "1042")]
    # A replay runs nothing and adds nothing.
    assert receipts.run_once("pay:1", "payments.charge", charge, "ch_1") == "ch_1"
    assert stored() == [("stripe.charge", "ch_1"), ("order", "1042")]


@pytest.mark.django_db
def test_references_of_a_failed_attempt_are_stored_with_the_failure():
    def charge_then_crash() -> None:
        receipts.current().refer("stripe.charge", "ch_lost")
        raise RuntimeError("the gateway answered, then we fell over")

    with pytest.raises(RuntimeError):
        receipts.run_once("pay:2", "payments.charge", charge_then_crash)
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and stored(receipt) == [("stripe.charge", "ch_lost")]


@pytest.mark.django_db
def test_a_settle_refused_for_a_stale_token_stores_none_of_its_references():
    first = store.claim("test", "pay:3", "payments.charge", lease_seconds=1)
    with time_machine.travel(timezone.now() + timedelta(seconds=5)):
        second = store.claim("test", "pay:3", "payments.charge")
        assert second.outcome == "lease_takeover"
        store.complete(store.Held("test", "pay:3", second.token), body="{}", references=[("stripe.charge", "ch_second")])
        with pytest.raises(StaleToken):
            store.complete(store.Held("test", "pay:3", first.token), body="{}", references=[("stripe.charge", "ch_first")])
    assert stored() == [("stripe.charge", "ch_second")]


@pytest.mark.django_db
def test_a_bad_reference_raises_in_the_step_and_fails_the_attempt_without_storing_it():
    def bad() -> None:
        receipts.current().refer("stripe.charge", "ch_\u202e1")

    with pytest.raises(InvalidReference):
        receipts.run_once("pay:4", "payments.charge", bad)
    assert Receipt.objects.get().status == "failed" and stored() == []


@pytest.mark.django_db
def test_a_settle_without_references_never_touches_their_table():
    with CaptureQueriesContext(connection) as plain:
        receipts.run_once("pay:5", "payments.charge", lambda: "done")
    with CaptureQueriesContext(connection) as referred:
        receipts.run_once("pay:6", "payments.charge", charge, "ch_6")
    table = ReceiptReference._meta.db_table
    assert not [q for q in plain.captured_queries if table in q["sql"]]
    # With references: the receipt's id (the settle's row, already locked) and one insert.
    assert len(referred.captured_queries) == len(plain.captured_queries) + 2


# --- a kill -9 and racing threads ---------------------------------------------------------------

def _killed_child(reached: str) -> None:
    def charge_then_hang() -> None:
        receipts.current().refer("stripe.charge", "ch_killed")
        Path(reached).touch()
        time.sleep(60)  # killed here, before the attempt settles

    receipts.run_once("pay:7", "payments.charge", charge_then_hang, lease_seconds=1)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_attempt_killed_mid_step_leaves_no_references_and_the_next_attempt_stores_its_own(tmp_path):
    killed_once_it_reaches(_killed_child, (str(tmp_path / "reached"),), tmp_path / "reached")
    assert Receipt.objects.get().status == "processing" and stored() == []
    # Waits out the dead attempt's lease, takes it over, and refers to what it did itself.
    assert receipts.run_once("pay:7", "payments.charge", charge, "ch_rerun") == "ch_rerun"
    assert stored() == [("stripe.charge", "ch_rerun"), ("order", "1042")]


@pytest.mark.django_db(transaction=True)
def test_of_threads_racing_on_one_key_only_the_one_that_ran_leaves_references(settings):
    threads, ran, errors = 6, [], []
    settings.RECEIPTS_MAX_WAITERS = threads  # every duplicate may wait for the one that runs

    def caller(n: int) -> None:
        def step() -> str:
            ran.append(n)
            # The others arrive while it runs: each waits for its result.
            until(lambda: waiting.waiting_now() == threads - 1, "the other callers wait for the one that runs")
            receipts.current().refer("stripe.charge", f"ch_{n}")
            return f"ch_{n}"

        try:
            receipts.run_once("pay:8", "payments.charge", step)
        except Exception as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    in_threads(threads, caller)
    assert errors == [] and len(ran) == 1
    assert stored() == [("stripe.charge", f"ch_{ran[0]}")]


# --- found by value ----------------------------------------------------------------------------

@pytest.mark.django_db
def test_objects_referring_to_a_value_are_found_by_it_and_by_kind():
    receipts.run_once("pay:9", "payments.charge", charge, "ch_9")
    receipts.run_once("pay:10", "payments.charge", charge, "ch_10")
    message = outbox.enqueue("http.post", {"url": URL}, "note-9", references=[("stripe.charge", "ch_9")]).message
    found = objects_referring("ch_9")
    assert [r.key for r in found.receipts] == ["pay:9"] and found.messages == [message] and found.events == []
    assert {r.key for r in objects_referring("1042").receipts} == {"pay:9", "pay:10"}
    assert objects_referring("1042", kind="stripe.charge").receipts == []
    assert not objects_referring("ch_unknown")
    assert list(referring(Receipt, "ch_10").values_list("key", flat=True)) == ["pay:10"]


# --- the outbox messages a claim's step enqueued ---------------------------------------------------

@pytest.mark.django_db
def test_a_message_enqueued_in_a_run_once_step_records_the_receipt_as_its_cause():
    def step() -> None:
        outbox.enqueue("http.post", {"url": URL}, "welcome-1")

    receipts.run_once("welcome:1", "email.send", step)
    outside = outbox.enqueue("http.post", {"url": URL}, "unrelated").message
    receipt, message = Receipt.objects.get(), OutboxMessage.objects.get(key="welcome-1")
    assert (message.cause_kind, message.cause_id) == ("receipt", receipt.pk)
    assert list(caused_by(receipt)) == [message] and cause_of(message) == receipt
    assert (outside.cause_kind, outside.cause_id, cause_of(outside)) == ("", None, None)


def charge_through(client: Client, path: str, charge_id: str) -> int:
    """POST a charge to a test view that refers to it and enqueues a message; its status."""
    return client.post(path, json.dumps({"charge": charge_id}), content_type="application/json",
                       headers={"Idempotency-Key": f"order-{charge_id}"}).status_code


@pytest.mark.django_db
@pytest.mark.urls("tests.receipts.references_urls")
def test_a_decorated_view_stores_its_references_and_its_message_names_the_receipt(client: Client):
    assert charge_through(client, "/charge", "ch_view") == 201
    receipt, message = Receipt.objects.get(), OutboxMessage.objects.get()
    assert stored(receipt) == [("stripe.charge", "ch_view")]
    assert cause_of(message) == receipt and list(caused_by(receipt)) == [message]


@pytest.mark.django_db
@pytest.mark.urls("tests.receipts.references_urls")
def test_a_view_answering_5xx_keeps_its_references_with_the_failure_and_rolls_its_message_back(client: Client):
    assert charge_through(client, "/charge-then-502", "ch_502") == 502
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and stored(receipt) == [("stripe.charge", "ch_502")]
    assert not OutboxMessage.objects.exists()  # enqueued in the view's transaction, rolled back with it


@pytest.mark.django_db
def test_a_message_whose_cause_was_purged_keeps_the_id_and_finds_no_receipt():
    receipts.run_once("welcome:2", "email.send", lambda: outbox.enqueue("http.post", {"url": URL}, "welcome-2") and None)
    receipt = Receipt.objects.get()
    Receipt.objects.filter(pk=receipt.pk).delete()
    message = OutboxMessage.objects.get()
    assert message.cause_id == receipt.pk and cause_of(message) is None


# --- the purge takes a receipt's references with it ---------------------------------------------

@pytest.mark.django_db
def test_purging_an_expired_receipt_deletes_its_references_and_keeps_the_others():
    receipts.run_once("pay:11", "payments.charge", charge, "ch_11")
    with time_machine.travel(Receipt.objects.get().expires_at + timedelta(hours=1)):
        receipts.run_once("pay:12", "payments.charge", charge, "ch_12")
        retention.purge(batch_size=10)
    assert list(Receipt.objects.values_list("key", flat=True)) == ["pay:12"]
    assert stored() == [("stripe.charge", "ch_12"), ("order", "1042")]


# --- the preflight: what is on record before an operator runs something again -------------------


@pytest.mark.django_db
def test_side_effects_on_record_list_a_receipts_messages_and_completed_receipts_under_its_references():
    from receipts.references import side_effects_on_record

    def charge() -> None:
        receipts.current().refer("stripe.charge", "ch_1")
        outbox.enqueue("http.post", {"url": URL}, "receipt-mail-ch_1")

    receipts.run_once("order-1", "payment.create", charge)
    receipts.run_once("refund-1", "refund.create", lambda: receipts.current().refer("stripe.charge", "ch_1"))
    receipts.run_once("order-2", "payment.create", lambda: receipts.current().refer("stripe.charge", "ch_2"))
    order, refund = Receipt.objects.get(key="order-1"), Receipt.objects.get(key="refund-1")
    OutboxMessage.objects.filter(key="receipt-mail-ch_1").update(status="sent", sent_at=timezone.now())

    found = side_effects_on_record(order)
    assert [m.key for m in found.messages] == ["receipt-mail-ch_1"] and [m.key for m in found.sent] == ["receipt-mail-ch_1"]
    assert found.receipts == [refund]  # the same charge, another step; not order-2, not itself
    assert not side_effects_on_record(Receipt.objects.get(key="order-2"))  # nothing caused, nothing shared


@pytest.mark.django_db
def test_a_message_about_to_be_sent_again_is_its_own_side_effect():
    from receipts.references import side_effects_on_record

    message = outbox.enqueue("http.post", {"url": URL}, "m-1").message
    assert side_effects_on_record(message).messages == [message]
    assert side_effects_on_record(message).sent == []


@pytest.mark.django_db
def test_the_bulk_count_names_the_units_whose_message_was_sent():
    from receipts.references import with_sent_side_effects

    for n in range(3):
        receipts.run_once(f"k{n}", "email.send", lambda n=n: outbox.enqueue("http.post", {"url": URL}, f"m{n}") and None)
    OutboxMessage.objects.filter(key__in=["m0", "m2"]).update(status="sent")
    assert with_sent_side_effects(Receipt.objects.all()) == 2
    assert with_sent_side_effects(Receipt.objects.filter(key="k1")) == 0
