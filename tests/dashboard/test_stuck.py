from __future__ import annotations

import re

import pytest

from tests.dashboard.build import completed, outbox_message, stuck, webhook_event

pytestmark = pytest.mark.django_db


def test_it_lists_stuck_receipts_oldest_first(viewer_client):
    stuck("newer", minutes_ago=5)
    stuck("older", minutes_ago=50)
    completed("done")
    html = viewer_client.get("/stuck/").content.decode()
    assert re.findall(r'<td class="key"><a [^>]+>([^<]+)<', html) == ["older", "newer"]


def test_operators_get_a_release_link_that_returns_here(operator_client, viewer_client):
    r = stuck("k1")
    assert f'href="/receipts/{r.pk}/release/?next=/stuck/"' in operator_client.get("/stuck/").content.decode()
    assert "Release…" not in viewer_client.get("/stuck/").content.decode()


def test_nothing_stuck_says_so_for_each_store(viewer_client):
    html = viewer_client.get("/stuck/").content.decode()
    assert "No receipt is stuck" in html and "No event is stuck" in html and "No outbox message is stuck" in html


def test_it_lists_stuck_events_and_messages_oldest_first_with_release(operator_client):
    webhook_event("evt_new", "processing", minutes_ago=5)
    webhook_event("evt_old", "processing", minutes_ago=50)
    webhook_event("evt_live", "processing")
    outbox_message("m-live", "in_flight")  # newest first: see the builder
    outbox_message("m-new", "in_flight", minutes_ago=4)
    old = outbox_message("m-old", "in_flight", minutes_ago=40)
    html = operator_client.get("/stuck/").content.decode()
    assert re.findall(r'href="/events/\d+/">([^<]+)<', html) == ["evt_old", "evt_new"]
    assert re.findall(r'href="/outbox/\d+/">([^<]+)<', html) == ["m-old", "m-new"]
    assert f'href="/outbox/{old.pk}/release/?next=/stuck/"' in html


def test_the_board_refreshes_itself_in_place_from_the_same_url(viewer_client):
    stuck("k1")
    html = viewer_client.get("/stuck/").content.decode()
    assert '<div id="stuck-board" hx-get="/stuck/" hx-trigger="every 15s" hx-swap="outerHTML"' in html
    fragment = viewer_client.get("/stuck/", headers={"HX-Request": "true"}).content.decode()
    assert '<div id="stuck-board"' in fragment and ">k1</a>" in fragment and "<html" not in fragment
    stuck("k2")  # what the next poll shows without a reload
    assert ">k2</a>" in viewer_client.get("/stuck/", headers={"HX-Request": "true"}).content.decode()


def test_each_lease_reads_as_the_time_it_expired_and_how_long_ago(viewer_client):
    from receipts.models import Receipt

    r = stuck("k1", minutes_ago=50)
    expired = Receipt.objects.get(pk=r.pk).lease_expires_at
    html = viewer_client.get("/stuck/").content.decode()
    cell = html.split('data-role="lease-expired">')[1].split("</td>")[0]
    assert expired.strftime("%Y-%m-%d %H:%M:%S") in cell and " ago</span>" in cell
