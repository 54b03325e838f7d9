"""The search (`/search/`) and trace (`/trace/`) pages: idemdash/dashboard/views/search.py."""

from __future__ import annotations

import pytest

from tests.dashboard.build import completed, outbox_message, webhook_event

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", ["/search/?q=x", "/trace/?q=x"])
def test_it_requires_the_dashboards_view_permission(client, outsider_client, path):
    assert client.get(path).status_code == 302
    assert outsider_client.get(path).status_code == 403


def test_an_order_id_finds_every_kind_grouped_with_a_link_to_its_trace(viewer_client):
    receipt = completed("checkout:ord_42", request={"order": "ord_42"})
    event = webhook_event("evt_42", payload={"id": "evt_42", "data": {"object": {"metadata": {"order": "ord_42"}}}})
    message = outbox_message("mail-ord_42", payload={"to": "a@example.com", "subject": "ord_42", "body": "hi"})
    response = viewer_client.get("/search/?q=ord_42")
    html = response.content.decode()
    assert response.status_code == 200
    assert html.index('data-kind="receipt"') < html.index('data-kind="event"') < html.index('data-kind="message"')
    for url in (f"/receipts/{receipt.pk}/", f"/events/{event.pk}/", f"/outbox/{message.pk}/"):
        assert f'href="{url}"' in html
    assert '<strong>3</strong> found for <code>ord_42</code>' in html
    assert 'href="/trace/?q=ord_42" data-role="trace-link"' in html


def test_an_empty_box_explains_what_is_searched(viewer_client):
    for path in ("/search/", "/search/?q=", "/search/?q=%20%20"):
        response = viewer_client.get(path)
        assert response.status_code == 200
        assert "Find everything about one id" in response.content.decode()


def test_a_10_kb_text_gets_a_clear_400_page(viewer_client):
    for path in ("/search/", "/trace/"):
        response = viewer_client.get(path, {"q": "x" * 10_240})
        assert response.status_code == 400
        assert "That is 10,240 characters long; the longest id searched for is 512." in response.content.decode()


def test_a_nul_character_is_refused_before_the_page_as_in_every_query(viewer_client):
    response = viewer_client.get("/search/?q=a%00b")
    assert response.status_code == 400 and response["Content-Type"] == "application/problem+json"


def test_nothing_found_says_so(viewer_client):
    completed("a")
    html = viewer_client.get("/search/?q=ord_missing").content.decode()
    assert "Nothing found for <code>ord_missing</code>" in html


def test_caller_text_is_escaped_in_results_box_and_title(viewer_client):
    key = '<img src=x onerror=alert(1)>"\u202e'
    completed("k", request={"note": key})
    html = viewer_client.get("/search/", {"q": key}).content.decode()
    assert "<img src=x" not in html and "<strong>1</strong> found" in html
    assert "&lt;img src=x onerror=alert(1)&gt;&quot;" in html
    # The box in the header keeps what was searched, escaped.
    assert 'name="q" aria-label="Search by id"' in html and 'value="&lt;img src=x onerror=alert(1)&gt;&quot;' in html


def test_the_search_box_is_in_the_header_of_every_page(viewer_client):
    for path in ("/", "/receipts/", "/events/", "/outbox/", "/stuck/", "/audit/", "/alerts/"):
        html = viewer_client.get(path).content.decode()
        assert '<form class="search-box" role="search" method="get" action="/search/">' in html, path


def test_htmx_gets_the_results_alone(viewer_client):
    completed("ord_9")
    html = viewer_client.get("/search/?q=ord_9", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<div id="search-results"') and "<html" not in html


def test_the_trace_page_lists_the_steps_oldest_first(viewer_client):
    receipt = completed("ord_77")
    html = viewer_client.get("/trace/?q=ord_77").content.decode()
    claimed, done = html.index(">claimed<"), html.index(">completed<")
    assert claimed < done
    assert f'href="/receipts/{receipt.pk}/"' in html
    assert "Nothing to trace" in viewer_client.get("/trace/?q=nope").content.decode()
