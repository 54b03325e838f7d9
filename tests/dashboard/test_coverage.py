"""The Coverage page (idemdash/dashboard/views/coverage.py): the host's write routes, what is
unprotected first, each protected one with its operation's figures."""

from __future__ import annotations

import re

import pytest

from receipts import observe, store

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.dashboard.coverage_urls")]


def _rows(html: str) -> list[tuple[str, str, str]]:
    return [(m, p, state) for state, m, p in re.findall(
        r'<tr data-protected="(yes|no)">\s*<td><code>([A-Z]+|any)</code></td>\s*<td class="key"><code>([^<]+)</code>', html)]


def test_it_lists_the_unprotected_routes_first_and_counts_the_protected(viewer_client):
    html = viewer_client.get("/coverage/").content.decode()
    rows = _rows(html)
    assert len(rows) == 24 and "14 of 24 protected" in html  # the receiver twice, and the JSON API
    states = [state for _, _, state in rows]
    assert states == sorted(states)  # every "no" before every "yes"
    assert ("DELETE", "/shop/orders/&lt;int:pk&gt;/refund/", "no") in rows
    assert ("POST", "/shop/orders/", "yes") in rows
    assert "/alerts/" not in html.split("<tbody>")[1]  # the dashboard's own routes are not listed


def test_a_protected_route_shows_its_operations_keys_and_duplicates(viewer_client):
    claim = store.claim("client:a", "o-1", "order.create", {"n": 1})
    store.complete(claim.held, body="{}")
    store.claim("client:a", "o-1", "order.create", {"n": 1})
    html = viewer_client.get("/coverage/").content.decode()
    row = re.search(r'<code>/shop/orders/</code>.*?</tr>', html, re.S).group(0)
    assert 'href="/receipts/?operation=order.create"' in row
    assert re.findall(r'<td class="num[^"]*">([^<]+)</td>', row) == ["1 key", "1"]


def test_an_unprotected_route_shows_the_requests_and_would_be_duplicates_noted(viewer_client):
    for _ in range(2):
        viewer_client.post("/notes/", "{}", content_type="application/json")
    observe.flush()
    html = viewer_client.get("/coverage/").content.decode()
    row = re.search(r'<code>/notes/</code>.*?</tr>', html, re.S).group(0)
    assert re.findall(r'<td class="num[^"]*">([^<]+)</td>', row) == ["2 requests", "1"]
    recent = html.split('id="coverage-recent"')[1]
    # The view never looked its user up: the caller is the viewer's session, hashed.
    assert "<code>/notes/</code>" in recent and "credential:" in recent


def test_the_unprotected_routes_come_most_duplicated_first(viewer_client):
    # In URLconf order the refund comes before the notes; the notes are repeated more.
    for _ in range(2):
        viewer_client.post("/shop/orders/7/refund/", '{"amount": 500}', content_type="application/json")
    for _ in range(3):
        viewer_client.post("/notes/", "{}", content_type="application/json")
    observe.flush()
    html = viewer_client.get("/coverage/").content.decode()
    unprotected = re.findall(r'<tr data-protected="no">.*?</tr>', html, re.S)
    duplicates = [int(re.findall(r'<td class="num[^"]*">([^<]+)</td>', row)[1]) for row in unprotected]
    assert duplicates == sorted(duplicates, reverse=True) and duplicates[:2] == [2, 1]
    assert "<code>/notes/</code>" in unprotected[0] and "/refund/" in unprotected[1]


def test_it_needs_a_login(client):
    response = client.get("/coverage/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_latest_fresh_key_retries_link_both_keys_and_say_which_ran_again(viewer_client, settings):
    from receipts.models import Receipt

    settings.RECEIPTS_OPERATIONS = {"refund.*": {"fresh_key": "refuse"}}
    store.claim("client:app", "k1", "email.send", {"to": "a"})
    store.claim("client:app", "k2", "email.send", {"to": "a"})
    store.claim("client:app", "r1", "refund.create", {"order": 1})
    store.claim("client:app", "r2", "refund.create", {"order": 1})
    html = viewer_client.get("/coverage/").content.decode()
    section = html[html.index('id="coverage-fresh-keys"'):]
    rows = re.findall(r"<tr>.*?</tr>", section, re.S)
    ids = dict(Receipt.objects.values_list("key", "pk"))
    refused, ran = rows[1], rows[2]  # newest first, after the header
    assert ">r2<" in refused and f'href="/receipts/{ids["r1"]}/">r1<' in refused and "refused (409)" in refused
    assert f'href="/receipts/{ids["k2"]}/">k2<' in ran and f'href="/receipts/{ids["k1"]}/">k1<' in ran and "ran again" in ran
