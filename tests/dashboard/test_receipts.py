from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
import time_machine

from idemdash.dashboard import forms
from receipts import retention, store
from tests.dashboard.build import completed, failed, mismatched, stuck

pytestmark = pytest.mark.django_db


def keys(response) -> list[str]:
    return re.findall(r'<td class="key"><a href="/receipts/\d+/"[^>]*>([^<]+)</a>', response.content.decode())


def test_the_list_shows_receipts_newest_first(viewer_client):
    for key in ("first", "second", "third"):
        completed(key)
    response = viewer_client.get("/receipts/")
    assert response.status_code == 200
    assert keys(response) == ["third", "second", "first"]


def test_it_filters_by_status_operation_scope_and_key_prefix(viewer_client):
    completed("order-1", "payment.create")
    failed("order-2", "payment.create")
    failed("order-3", "email.send")
    failed("invoice-4", "payment.create", scope="client:billing")
    assert keys(viewer_client.get("/receipts/?status=failed")) == ["invoice-4", "order-3", "order-2"]
    assert keys(viewer_client.get("/receipts/?status=failed&operation=payment.create")) == ["invoice-4", "order-2"]
    assert keys(viewer_client.get("/receipts/?scope=client:billing")) == ["invoice-4"]
    assert keys(viewer_client.get("/receipts/?q=order-")) == ["order-3", "order-2", "order-1"]


def test_it_filters_by_creation_time(viewer_client):
    for day, key in ((1, "jan1"), (2, "jan2"), (3, "jan3")):
        with time_machine.travel(datetime(2026, 1, day, 12, tzinfo=timezone.utc), tick=False):
            completed(key)
    response = viewer_client.get("/receipts/?since=2026-01-02T00:00&until=2026-01-02T23:59")
    assert keys(response) == ["jan2"]


def test_it_sorts_oldest_first_and_by_last_change(viewer_client):
    a = completed("a")
    completed("b")
    with time_machine.travel(a.updated_at + timedelta(hours=1), tick=False):
        store.claim("client:shop", "a", "payment.create", {"key": "a"})  # a replay does not change the row
        failed("c")
    assert keys(viewer_client.get("/receipts/?sort=created")) == ["a", "b", "c"]
    assert keys(viewer_client.get("/receipts/?sort=-updated")) == ["c", "b", "a"]


def test_pages_follow_each_other_by_keyset_without_gaps_or_repeats(viewer_client, monkeypatch):
    monkeypatch.setattr(forms, "PAGE_SIZE", 3)
    moment = datetime(2026, 1, 1, tzinfo=timezone.utc)
    with time_machine.travel(moment, tick=False):  # equal timestamps: the id breaks ties
        for i in range(8):
            completed(f"k{i}")
    seen, url = [], "/receipts/?status=completed"
    while url:
        response = viewer_client.get(url)
        seen += keys(response)
        match = re.search(r'href="(/receipts/\?[^"]*after=[^"]+)"', response.content.decode())
        url = match.group(1).replace("&amp;", "&") if match else None
        assert not url or "status=completed" in url  # the filter survives paging
    assert seen == [f"k{i}" for i in reversed(range(8))]


def test_an_htmx_filter_request_gets_the_table_fragment(viewer_client):
    failed("k1")
    response = viewer_client.get("/receipts/?status=failed", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="receipt-table"')
    assert "<form" not in html and "<html" not in html


def test_the_filter_form_pushes_its_url_and_links_keep_their_href(viewer_client):
    html = viewer_client.get("/receipts/").content.decode()
    assert 'hx-push-url="true"' in html and 'hx-get="/receipts/"' in html and 'action="/receipts/"' in html


def test_bad_filter_values_are_a_400_with_the_reason(viewer_client):
    response = viewer_client.get("/receipts/?status=exploded")
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()
    response = viewer_client.get("/receipts/?after=not-a-cursor")
    assert response.status_code == 400 and "cursor is not valid" in response.content.decode()


def test_empty_states_say_what_to_do(viewer_client):
    assert "No receipts yet" in viewer_client.get("/receipts/").content.decode()
    assert "No receipts match these filters" in viewer_client.get("/receipts/?q=zzz").content.decode()


def test_operators_see_bulk_release_for_failed_receipts_and_viewers_do_not(viewer_client, operator_client):
    failed("k1")
    offer = "Release failed receipts…"
    assert offer in operator_client.get("/receipts/?status=failed").content.decode()
    assert offer not in viewer_client.get("/receipts/?status=failed").content.decode()
    assert offer not in operator_client.get("/receipts/").content.decode()


def test_a_stuck_receipt_is_listed_as_processing(viewer_client):
    stuck("k1")
    assert "badge-processing" in viewer_client.get("/receipts/").content.decode()


def test_it_filters_keys_that_had_concurrent_duplicates_or_422s(viewer_client):
    from tests.dashboard.build import mismatched

    mismatched("got-422", {"a": 1}, {"a": 2})
    busy = store.claim("client:shop", "got-409", "email.send", {})
    store.claim("client:shop", "got-409", "email.send", {})
    store.complete(store.Held("client:shop", "got-409", busy.token))
    completed("calm")
    assert keys(viewer_client.get("/receipts/?conflict=422")) == ["got-422"]
    assert keys(viewer_client.get("/receipts/?conflict=concurrent")) == ["got-409"]


def test_the_conflict_filter_does_not_count_a_purged_receipts_conflicts_against_its_key(viewer_client):
    with time_machine.travel(datetime.now(timezone.utc) - timedelta(days=8), tick=False):
        mismatched("k1", {"amount": 500}, {"amount": 900})
    retention.purge()
    completed("k1")
    response = viewer_client.get("/receipts/", {"conflict": "422"})
    assert response.status_code == 200 and keys(response) == []
    assert keys(viewer_client.get("/receipts/")) == ["k1"]


def test_the_pager_says_how_many_receipts_match_the_filter(viewer_client, monkeypatch):
    monkeypatch.setattr(forms, "PAGE_SIZE", 2)
    for i in range(5):
        failed(f"f{i}")
    completed("ok")
    html = viewer_client.get("/receipts/?status=failed").content.decode()
    assert re.search(r'data-role="total">2 shown of 5 matching<', html)


def test_past_the_cap_the_total_says_more_than(viewer_client, monkeypatch):
    from idemdash.dashboard import queries

    monkeypatch.setattr(queries, "TOTAL_CAP", 3)
    for i in range(5):
        failed(f"f{i}")
    html = viewer_client.get("/receipts/").content.decode()
    assert "5 shown of more than 3" in html


def test_each_row_shows_its_replays_concurrent_duplicates_and_422s(viewer_client, django_assert_max_num_queries):
    mismatched("m", {"amount": 1}, {"amount": 2})
    store.claim("client:shop", "m", "payment.create", {"amount": 1})  # a replay
    store.claim("client:shop", "busy", "payment.create", {"key": "busy"})
    store.claim("client:shop", "busy", "payment.create", {"key": "busy"})  # a 409
    for i in range(10):
        completed(f"plain{i}")
    viewer_client.get("/receipts/")  # warm the session and permission caches
    # A fixed number (session, user, permissions, the page, the bounded count in a savepoint
    # with its timeout on PostgreSQL, an EXPLAIN, the grouped counts), not one more per row:
    # 12 rows are on the page.
    with django_assert_max_num_queries(11):
        html = viewer_client.get("/receipts/").content.decode()
    counts = dict(re.findall(r'<td class="num" data-count="(\w+)">([^<]+)</td>', html.split(">m<", 1)[1].split("</tr>", 1)[0]))
    assert counts == {"replays": "1", "concurrent": "–", "422": "1"}
    busy = html.split(">busy<", 1)[1].split("</tr>", 1)[0]
    assert re.search(r'data-count="concurrent">1<', busy)


def test_timestamps_carry_their_time_zone(viewer_client):
    completed("k")
    html = viewer_client.get("/receipts/").content.decode()
    assert re.search(r'<time datetime="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</time>', html)


def test_a_form_error_is_named_by_the_field_label(viewer_client):
    response = viewer_client.get("/receipts/?since=yesterday&q=" + "x" * 300)
    assert response.status_code == 400
    html = response.content.decode()
    assert "Created from: Enter a valid date/time." in html
    assert "Key starts with: Ensure this value" in html
    assert "since:" not in html and "q:" not in html


def test_the_reference_filter_lists_exactly_the_receipts_that_refer_to_the_value(viewer_client):
    from tests.dashboard.build import charged

    charged("order-1", "ch_1", order="1")
    charged("order-2", "ch_2", order="2")
    completed("plain")
    assert keys(viewer_client.get("/receipts/", {"ref": "ch_2"})) == ["order-2"]
    assert keys(viewer_client.get("/receipts/", {"ref": "ch_unknown"})) == []
    assert keys(viewer_client.get("/receipts/", {"ref": "ch_1", "status": "failed"})) == []
    assert len(keys(viewer_client.get("/receipts/"))) == 3
