"""What the dashboard's event, outbox and rejected-delivery lists share: each needs a login and
the view permission, a bad filter is a 400, and operators (not viewers) are offered the
list's bulk action on its dead rows; every list (receipts too) is one list page
(templates/dashboard/list_page.html) under the site's navigation. One parametrized test each
instead of a copy per page."""

from __future__ import annotations

import pytest

from tests.dashboard.test_events import events  # noqa: F401 (fixture)
from tests.dashboard.test_outbox import messages  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", ["/events/", "/outbox/", "/rejected/"])
def test_it_needs_a_login_and_the_view_permission(client, outsider_client, url):
    assert client.get(url)["Location"].startswith("/accounts/login/")
    assert outsider_client.get(url).status_code == 403


@pytest.mark.parametrize("url,table,segments", [
    ("/receipts/", "receipt-table", False),
    ("/events/", "event-table", True),
    ("/rejected/", "rejected-table", True),
    ("/outbox/", "outbox-table", False),
])
def test_each_list_keeps_the_site_navigation_and_filters_its_own_table(viewer_client, url, table, segments):
    html = viewer_client.get(url).content.decode()
    assert '<nav class="nav">' in html and 'href="/audit/"' in html
    assert f'action="{url}" hx-get="{url}" hx-target="#{table}"' in html and f'id="{table}"' in html
    assert ('aria-label="Webhook pages"' in html) == segments


@pytest.mark.parametrize("url", [
    "/events/?status=exploded",
    "/outbox/?status=lost",
    "/outbox/?since=yesterday",
    "/rejected/?cause=bored",
])
def test_a_bad_filter_is_a_400(viewer_client, url):
    assert viewer_client.get(url).status_code == 400


@pytest.mark.parametrize("rows,url,bulk_url,label", [
    ("events", "/events/?status=dead", "/events/bulk-reprocess/?status=dead", "Reprocess dead events"),
    ("messages", "/outbox/?status=dead", "/outbox/bulk-send-again/?status=dead", "Send dead messages again"),
])
def test_operators_are_offered_the_bulk_action_on_dead_rows(request, operator_client, viewer_client, rows, url, bulk_url, label):
    request.getfixturevalue(rows)
    html = operator_client.get(url).content.decode()
    assert bulk_url in html and f"{label}…" in html
    assert label not in viewer_client.get(url).content.decode()


@pytest.mark.parametrize("url,table", [
    ("/receipts/?status=failed&operation=payment.create", "receipt-table"),
    ("/events/?status=dead&type=charge.failed", "event-table"),
    ("/outbox/?status=dead&action=http.post", "outbox-table"),
    ("/rejected/?cause=no_matching_signature", "rejected-table"),
])
def test_a_list_refreshes_its_table_in_place_with_its_filters(viewer_client, url, table):
    path, query = url.split("?")
    html = viewer_client.get(url).content.decode()
    tag = html.split(f'<div id="{table}"')[1].split(">")[0]
    assert f'hx-get="{path}?{query.replace("&", "&amp;")}" hx-trigger="every 15s" hx-swap="outerHTML"' in tag
    # The poll is answered with the table alone, filtered as before.
    fragment = viewer_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert f'<div id="{table}"' in fragment and "<form" not in fragment.split(f'<div id="{table}"')[0]
    assert "<html" not in fragment


def test_an_older_page_of_a_list_holds_still(viewer_client):
    from tests.dashboard.build import failed

    for i in range(60):
        failed(f"k-{i:02d}")
    first = viewer_client.get("/receipts/").content.decode()
    after = first.split("after=")[1].split('"')[0]
    older = viewer_client.get(f"/receipts/?after={after}").content.decode()
    assert 'hx-trigger="every 15s"' in first.split('<div id="receipt-table"')[1].split(">")[0]
    assert "hx-trigger" not in older.split('<div id="receipt-table"')[1].split(">")[0]
