"""idemdash/dashboard/search.py: what an id finds, on PostgreSQL (through the GIN indexes of
migration idemdash 0008) and on SQLite (json_tree) alike, and the trace's timeline."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from django.db import connection
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from idemdash.core import audit
from idemdash.dashboard import search
from receipts import store
from receipts.models import Receipt
from tests.dashboard.build import SCOPE, outbox_message, webhook_event

pytestmark = pytest.mark.django_db

ORDER = "ord_7f3a"


def receipt(key: str, request=None, body: str = '{"id": "ch_1"}', at=None) -> Receipt:
    with time_machine.travel(at or timezone.now(), tick=False):
        claim = store.claim(SCOPE, key, "payment.create", request if request is not None else {"key": key})
        store.complete(store.Held(SCOPE, key, claim.token), response_status=201, content_type="application/json", body=body)
    return Receipt.objects.get(scope=SCOPE, key=key)


@pytest.fixture
def order_world():
    """One order's receipts, events and message, and decoys that only look like it."""
    now = timezone.now()
    world = {
        "by_key": receipt(f"checkout:{ORDER}", {"amount": 500}, at=now - timedelta(minutes=30)),
        "by_request": receipt("pay-1", {"order": {"id": ORDER}, "amount": 500}, at=now - timedelta(minutes=20)),
        "by_response": receipt("refund-1", {"amount": 1}, body=json.dumps({"refund": {"order": ORDER}}),
                               at=now - timedelta(minutes=10)),
        "stripe": webhook_event("evt_1", "completed", minutes_ago=25, event_type="payment_intent.succeeded", payload={
            "id": "evt_1", "type": "payment_intent.succeeded",
            "data": {"object": {"id": "pi_1", "metadata": {"order_id": ORDER}}}}),
        "shopify": webhook_event("shop-1", slug="shopify", provider="shopify", minutes_ago=15, event_type="orders/paid",
                                 payload={"id": 4507894, "name": "#1001", "note_attributes": [{"value": ORDER}]}),
        "message": outbox_message(f"email:{ORDER}:receipt", "sent", minutes_ago=5),
    }
    # Decoys: a longer id, the id inside text, a key that starts with it.
    receipt(f"{ORDER}0", {"note": f"x{ORDER}"})
    receipt("other", {"note": f"{ORDER} was paid"}, body=f'"{ORDER}"')
    outbox_message("unrelated", payload={"to": "a@example.com", "subject": f"Order {ORDER}", "body": f"x{ORDER}"})
    return world


def found(results: search.Results) -> dict[str, list]:
    return {g.kind.name: [h.obj.pk for h in g.hits] for g in results.groups}


def test_an_order_id_finds_its_receipts_events_and_message_newest_first_and_nothing_else(order_world):
    results = search.search(search.parse(ORDER))
    w = order_world
    assert found(results) == {
        "receipt": [w["by_response"].pk, w["by_request"].pk, w["by_key"].pk],
        "event": [w["shopify"].pk, w["stripe"].pk],
        "message": [w["message"].pk],
    }
    where = {(g.kind.name, h.obj.pk): h.found_in for g in results.groups for h in g.hits}
    assert where["receipt", w["by_key"].pk] == ["key"]
    assert where["receipt", w["by_request"].pk] == ["request"]
    assert where["receipt", w["by_response"].pk] == ["response"]
    assert where["event", w["stripe"].pk] == ["payload"]
    assert where["message", w["message"].pk] == ["key"]


def test_a_key_is_found_whole_and_by_each_of_its_parts(order_world):
    w = order_world
    for text in (f"checkout:{ORDER}", "checkout"):
        assert w["by_key"].pk in found(search.search(search.parse(text)))["receipt"], text
    assert found(search.search(search.parse(f"email:{ORDER}:receipt")))["message"] == [w["message"].pk]
    # Parts are whole parts: no prefix or substring of one.
    assert found(search.search(search.parse("checko")))["receipt"] == []


def test_ids_of_digits_find_integers_and_event_ids_find_their_event(order_world):
    w = order_world
    if connection.vendor != "mysql":  # JSON_SEARCH: MariaDB's matches integers too, MySQL's strings only
        assert found(search.search(search.parse("4507894")))["event"] == [w["shopify"].pk]
    assert found(search.search(search.parse("450789")))["event"] == []
    assert found(search.search(search.parse("evt_1")))["event"] == [w["stripe"].pk]
    assert found(search.search(search.parse("pi_1")))["event"] == [w["stripe"].pk]
    # The stored response of every builder's receipt holds ch_1.
    assert w["by_key"].pk in found(search.search(search.parse("ch_1")))["receipt"]


def test_a_response_that_is_not_json_is_searched_by_key_only(order_world):
    broken = receipt("broken-body", {"a": 1}, body='{"order": "' + ORDER + '"')  # cut short
    assert broken.pk not in found(search.search(search.parse(ORDER)))["receipt"]
    assert found(search.search(search.parse("broken-body")))["receipt"] == [broken.pk]


def test_past_the_limit_it_says_there_are_more():
    for i in range(4):
        receipt(f"k-{i}", {"order": ORDER})
    results = search.search(search.parse(ORDER), limit=3)
    (group,) = [g for g in results.groups if g.kind.name == "receipt"]
    assert len(group.hits) == 3 and group.more


@pytest.mark.parametrize("raw, message", [
    ("x" * (search.MAX_LENGTH + 1), "the longest id searched for is 512"),
    ("a\x00b", "NUL character"),
])
def test_it_refuses_text_that_cannot_be_an_id(raw, message):
    with pytest.raises(search.BadQuery, match=message):
        search.parse(raw)


def test_empty_text_is_no_search():
    assert search.parse("") is None and search.parse("   \n") is None and search.parse(None) is None


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=40).filter(lambda t: t.strip() == t and "\x00" not in t))
def test_any_value_stored_in_a_payload_is_found_by_itself(order_world, text):
    """Quotes, SQL and regex metacharacters, unicode, bidi controls: stored as a JSON value,
    the text finds its message, through the same query on each database. (The search box
    drops spaces around what is typed: a value with spaces at its ends is not generated.)"""
    message = outbox_message(f"h-{abs(hash(text))}-{timezone.now().timestamp()}", action="http.post",
                             payload={"url": "http://127.0.0.1:9/hook", "json": {"deep": [{"v": text}]}})
    try:
        results = search.search(search.parse(text))
        assert message.pk in found(results)["message"]
    finally:
        message.delete()


@hypothesis_settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(
    st.text(max_size=600),
    st.sampled_from(["'", '"', "%", "_", "\\", "' OR 1=1 --", ".*", "(?:a|b)+$", "[", "\u202eevil", "ü" * 600,
                     "%_%", "a" * 10_000, "1" * 30, "-0", "$.**", "[1]", '{"a":1}', "null", "true"]),
))
def test_no_search_text_makes_it_fail(order_world, raw):
    try:
        term = search.parse(raw)
    except search.BadQuery:
        assert len(raw.strip()) > search.MAX_LENGTH or "\x00" in raw
        return
    if term is not None:
        results = search.search(term)
        assert not results.timed_out
        search.trace(term)


def test_the_trace_lays_every_step_on_one_timeline_oldest_first(order_world, operator):
    w = order_world
    event = w["stripe"]
    audit.record("otto", "webhook_event.reprocess", event, "completed", "received", "customer asked", user=operator)
    trace = search.trace(search.parse(ORDER))
    times = [e.at for e in trace.entries]
    assert times == sorted(times)
    seen = {(e.kind, e.source, e.what) for e in trace.entries}
    assert ("receipt", "attempt", "claimed") in seen and ("receipt", "attempt", "completed") in seen
    assert ("event", "delivery", "received") in seen
    assert ("event", "processing", "processing #1: completed") in seen
    assert ("message", "send", "enqueued (email.send)") in seen
    assert ("message", "send", "send #1: sent") in seen
    (action,) = [e for e in trace.entries if e.source == "operator"]
    assert (action.unit, action.actor, action.what) == ("evt_1", "otto", "webhook_event.reprocess")
    assert action.detail == "completed → received · customer asked"
    # The order: the first receipt's claim (30 min ago) comes first, the operator's action last.
    assert trace.entries[0].unit == f"checkout:{ORDER}" and trace.entries[-1] is action


def test_a_trace_of_an_unknown_id_is_empty(order_world):
    trace = search.trace(search.parse("nothing-like-it"))
    assert trace.entries == [] and trace.results.total == 0


def test_on_postgresql_each_kind_reads_its_gin_index(order_world, on_postgres):
    if not on_postgres:
        pytest.skip("the indexes are PostgreSQL's")
    # Without enable_seqscan = off: the function's cost (the migration) makes the index the
    # planner's choice even on a table this small, and under the search's LIMIT.
    with connection.cursor() as cursor:
        for kind, index in (("receipt", "receipt_search"), ("event", "webhook_event_search"),
                            ("message", "outbox_message_search")):
            for text in (ORDER, "4507894"):
                sql, params = search.matching(kind, search.Term(text))[:search.LIMIT + 1].query.sql_with_params()
                cursor.execute("EXPLAIN " + sql, params)
                plan = "\n".join(row[0] for row in cursor.fetchall())
                assert f"Bitmap Index Scan on {index}" in plan, plan


# --- references ------------------------------------------------------------------------------

CHARGE = "ch_3RefOnly9"


@pytest.fixture
def referred_world():
    """A charge id held only as a reference: in no key, request, response or payload."""
    from receipts.models import ReceiptReference
    from receipts.outbox.models import MessageReference
    from webhooks.models import EventReference

    world = {
        "receipt": receipt("pay-ref-1", {"amount": 500}),
        "event": webhook_event("evt_ref_1", "completed", event_type="charge.succeeded", payload={"id": "evt_ref_1"}),
        "message": outbox_message("mail-ref-1", "sent", payload={"to": "a@example.com", "subject": "s", "body": "b"}),
    }
    ReceiptReference.store(world["receipt"].pk, [("stripe.charge", CHARGE), ("order", "1042")])
    EventReference.store(world["event"].pk, [("stripe.charge", CHARGE)])
    MessageReference.store(world["message"].pk, [("stripe.charge", CHARGE)])
    receipt("pay-ref-2", {"amount": 1})  # a decoy with no reference
    return world


def test_an_id_held_only_as_a_reference_finds_its_receipt_event_and_message(referred_world):
    results = search.search(search.Term(CHARGE))
    assert found(results) == {"receipt": [referred_world["receipt"].pk], "event": [referred_world["event"].pk],
                              "message": [referred_world["message"].pk]}
    assert {g.kind.name: g.hits[0].found_in for g in results.groups} == {
        "receipt": ["reference stripe.charge"], "event": ["reference stripe.charge"], "message": ["reference stripe.charge"],
    }
    # A reference is matched whole, like a JSON value: a part of it finds nothing.
    assert search.search(search.Term("ch_3RefOnly")).total == 0


def test_a_unit_found_by_its_key_and_a_reference_is_listed_once_with_both_places(referred_world):
    from receipts.models import ReceiptReference

    ReceiptReference.store(referred_world["receipt"].pk, [("order", "pay-ref-1")])
    [group] = [g for g in search.search(search.Term("pay-ref-1")).groups if g.hits]
    assert [(h.obj.pk, h.found_in) for h in group.hits] == [(referred_world["receipt"].pk, ["key", "reference order"])]


def test_the_trace_of_a_reference_shows_the_units_it_finds(referred_world):
    units = {(e.kind, e.unit) for e in search.trace(search.Term(CHARGE)).entries}
    assert {("receipt", "pay-ref-1"), ("message", "mail-ref-1")} <= units


def test_on_postgresql_a_reference_is_read_from_its_value_index(referred_world, on_postgres):
    if not on_postgres:
        pytest.skip("the plan is PostgreSQL's")
    from idemdash.core.reference_rows import referring
    from receipts.models import ReceiptReference
    from receipts.outbox.models import MessageReference
    from webhooks.models import EventReference

    # Enough other values that reading the whole table would cost more than the index, as in
    # any real log; statistics taken, as autovacuum would.
    owners = {"receipt": referred_world["receipt"].pk, "event": referred_world["event"].pk,
              "message": referred_world["message"].pk}
    for model, owner in ((ReceiptReference, "receipt"), (EventReference, "event"), (MessageReference, "message")):
        model.objects.bulk_create([model(**{f"{owner}_id": owners[owner]}, kind="order", value=f"o-{i}",
                                         created_at=timezone.now()) for i in range(5000)])
    with connection.cursor() as cursor:
        for model in (ReceiptReference, EventReference, MessageReference):
            cursor.execute(f'ANALYZE "{model._meta.db_table}"')
        for kind, index in (("receipt", "receipt_ref_value"), ("event", "webhook_event_ref_value"),
                            ("message", "outbox_message_ref_value")):
            sql, params = referring(search.KINDS[kind].model, CHARGE)[:search.LIMIT + 1].query.sql_with_params()
            cursor.execute("EXPLAIN " + sql, params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            assert f"Index Only Scan using {index}" in plan or f"Index Scan using {index}" in plan \
                or f"Bitmap Index Scan on {index}" in plan, plan
