from __future__ import annotations

import re

import pytest

from tests.dashboard.build import webhook_event

pytestmark = pytest.mark.django_db


def shown(html: str) -> list[str]:
    return re.findall(r'<td class="key"><a href="/events/\d+/"[^>]*>([^<]+)<', html)


@pytest.fixture
def events():
    webhook_event("evt_paid", "completed", event_type="invoice.paid", minutes_ago=30)
    webhook_event("evt_dead", "dead", event_type="charge.failed", minutes_ago=20)
    webhook_event("evt_shop", "received", slug="shop", provider="shopify", event_type="orders/create", minutes_ago=10)


def test_it_lists_events_newest_first(viewer_client, events):
    assert shown(viewer_client.get("/events/").content.decode()) == ["evt_shop", "evt_dead", "evt_paid"]


@pytest.mark.parametrize("query,expected", [
    ("endpoint=shop", ["evt_shop"]),
    ("provider=stripe", ["evt_dead", "evt_paid"]),
    ("type=charge.failed", ["evt_dead"]),
    ("status=completed", ["evt_paid"]),
    ("q=evt_d", ["evt_dead"]),
])
def test_each_filter_narrows_the_list(viewer_client, events, query, expected):
    assert shown(viewer_client.get(f"/events/?{query}").content.decode()) == expected


def test_a_time_filter_narrows_the_list(viewer_client, events):
    from django.utils import timezone
    from datetime import timedelta

    since = (timezone.now() - timedelta(minutes=15)).strftime("%Y-%m-%dT%H:%M")
    assert shown(viewer_client.get(f"/events/?since={since}").content.decode()) == ["evt_shop"]


def test_htmx_gets_the_table_alone_with_links_that_work_without_javascript(viewer_client, events):
    html = viewer_client.get("/events/?status=dead", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<div id="event-table"') and "<html" not in html
    assert re.search(r'<a href="/events/\d+/"[^>]*>evt_dead</a>', html)


def test_pages_continue_from_a_cursor(viewer_client, events, settings, monkeypatch):
    from idemdash.dashboard import forms

    monkeypatch.setattr(forms, "PAGE_SIZE", 2)
    first = viewer_client.get("/events/").content.decode()
    assert shown(first) == ["evt_shop", "evt_dead"]
    cursor = re.search(r'href="/events/\?after=([^"]+)"', first).group(1)
    assert shown(viewer_client.get(f"/events/?after={cursor}").content.decode()) == ["evt_paid"]
    assert viewer_client.get("/events/?after=garbage").status_code == 400


def test_no_events_says_how_to_get_some(viewer_client):
    html = viewer_client.get("/events/").content.decode()
    assert "No webhook events yet" in html and "stripe listen" in html


def test_no_match_says_how_to_widen(viewer_client, events):
    assert "No events match these filters" in viewer_client.get("/events/?type=nothing").content.decode()


def test_a_retrying_event_shows_when_its_next_attempt_is_due(viewer_client):
    event = webhook_event("evt_retry", "retry")
    html = viewer_client.get("/events/").content.decode()
    match = re.search(r'data-role="next-attempt">next <time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', html)
    assert match, html
    assert match.group(1) == event.next_attempt_at.isoformat()
    assert match.group(2).endswith(" UTC")
    assert re.fullmatch(r"in \d+ (s|min)|due now", match.group(3))


def test_the_pager_says_how_many_events_match(viewer_client, events):
    html = viewer_client.get("/events/").content.decode()
    assert re.search(r'data-role="total">\d+ shown of \d+ matching<', html)


def test_a_reprocess_is_marked_on_the_attempt_timeline_where_numbering_starts_again(operator_client):
    from webhooks import processing

    event = webhook_event("evt_marked", "dead")
    processing.reprocess(event, actor="otto", reason="handler fixed")
    html = operator_client.get(f"/events/{event.pk}/").content.decode()
    log = html.split('id="event-attempts"')[1].split("</section>")[0]
    mark = log.split('data-role="operator-mark"')[1].split("</li>")[0]
    assert "Reprocess" in mark and "“handler fixed”" in mark and "numbering starts again at #1" in mark
    assert log.index('data-attempt=') < log.index('data-role="operator-mark"')  # the attempt that died, then the mark


def test_the_reference_filter_lists_the_events_whose_handler_referred_to_the_value(viewer_client):
    from tests.dashboard.build import handled_event

    handled_event("evt_a", "ch_a")
    handled_event("evt_b", "ch_b")
    assert shown(viewer_client.get("/events/", {"ref": "ch_b"}).content.decode()) == ["evt_b"]


def test_a_dead_event_shows_the_cause_of_its_last_failure_not_its_traceback(viewer_client, events):
    html = viewer_client.get("/events/?status=dead").content.decode()
    cell = html.split('data-role="cause"')[1].split("</td>")[0]
    assert 'title="RuntimeError: ledger down"' in cell and "Traceback" not in cell
