from __future__ import annotations

import re

import pytest

from tests.dashboard.build import outbox_message

pytestmark = pytest.mark.django_db


def shown(html: str) -> list[str]:
    return re.findall(r'<td class="key"><a href="/outbox/\d+/"[^>]*>([^<]+)<', html)


@pytest.fixture
def messages():
    outbox_message("m-sent", "sent", minutes_ago=40)
    outbox_message("m-dead", "dead", action="http.post", minutes_ago=30)
    outbox_message("m-retry", "retry", action="http.post", minutes_ago=20)
    outbox_message("m-pending", "pending", minutes_ago=10)


def test_it_lists_messages_newest_first(viewer_client, messages):
    assert shown(viewer_client.get("/outbox/").content.decode()) == ["m-pending", "m-retry", "m-dead", "m-sent"]


@pytest.mark.parametrize("query,expected", [
    ("action=http.post", ["m-retry", "m-dead"]),
    ("status=dead", ["m-dead"]),
    ("status=waiting", ["m-pending", "m-retry"]),
    ("q=m-s", ["m-sent"]),
    ("action=email.send&status=sent", ["m-sent"]),
])
def test_each_filter_narrows_the_list(viewer_client, messages, query, expected):
    assert shown(viewer_client.get(f"/outbox/?{query}").content.decode()) == expected


def test_htmx_gets_the_table_alone(viewer_client, messages):
    html = viewer_client.get("/outbox/?status=dead", headers={"HX-Request": "true"}).content.decode()
    assert html.lstrip().startswith('<div id="outbox-table"') and shown(html) == ["m-dead"]


def test_an_empty_outbox_says_how_messages_get_there(viewer_client):
    html = viewer_client.get("/outbox/").content.decode()
    assert "The outbox is empty" in html and "/api/v1/outbox" in html


def test_a_retrying_message_shows_when_its_next_attempt_is_due(viewer_client, settings):
    # A backoff of minutes, not the default 2 s, which a loaded machine could pass before the
    # page renders ("due now").
    settings.OUTBOX_BACKOFF_BASE_SECONDS = 600
    outbox_message("m-retry", "retry")
    html = viewer_client.get("/outbox/").content.decode()
    assert re.search(r'data-role="next-attempt">next <time datetime="[^"]+" title="[^"]+ UTC">in \d+ (s|min)</time>', html), html


def test_a_form_error_is_named_by_the_field_label(viewer_client):
    html = viewer_client.get("/outbox/?since=garbage").content.decode()
    assert "From: Enter a valid date/time." in html


def test_the_reference_filter_lists_the_messages_given_the_value(viewer_client):
    from receipts.outbox import store as outbox_store

    for key, order in (("m1", "1"), ("m2", "2")):
        outbox_store.enqueue("email.send", {"to": "a@example.com", "subject": key, "body": "b"}, key,
                             references=[("order", order)])
    assert shown(viewer_client.get("/outbox/", {"ref": "2"}).content.decode()) == ["m2"]


def test_a_dead_message_shows_the_cause_of_its_last_failure_with_what_varies_masked(viewer_client):
    from receipts.outbox import store as outbox_store

    message = outbox_message("partner-1", "in_flight", action="http.post")
    outbox_store.mark_failed(message, "HTTP 403: forbidden for order 8200000000001", permanent=True, status_code=403,
                             drainer="test-drainer")
    html = viewer_client.get("/outbox/?status=dead").content.decode()
    assert 'title="HTTP 403: forbidden for order &lt;n&gt;"' in html.split('data-role="cause"')[1].split("</td>")[0]
