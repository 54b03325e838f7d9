from __future__ import annotations

import pytest

from tests.dashboard.build import outbox_message

pytestmark = pytest.mark.django_db


def test_it_shows_the_attempt_log_with_errors_and_the_payload(viewer_client):
    m = outbox_message("m1", "dead", action="http.post")
    html = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    assert "#1 dead" in html and "HTTP 400" in html and "HTTP 400: bad request" in html
    assert "127.0.0.1:9/hook" in html


def test_credentials_in_the_payload_headers_are_masked(viewer_client):
    m = outbox_message("m1", "pending", action="http.post")
    html = viewer_client.get(f"/outbox/{m.pk}/").content.decode()
    assert "s3cret-token" not in html and "••••" in html


def test_a_message_never_tried_says_so(viewer_client):
    m = outbox_message("m1", "pending")
    assert "Not attempted yet" in viewer_client.get(f"/outbox/{m.pk}/").content.decode()


@pytest.mark.parametrize("status,action", [("pending", "send-now"), ("retry", "send-now"), ("dead", "send-again")])
def test_operators_get_the_action_that_fits_the_status(operator_client, status, action):
    m = outbox_message("m1", status, action="http.post")
    assert f'hx-get="/outbox/{m.pk}/{action}/"' in operator_client.get(f"/outbox/{m.pk}/").content.decode()


def test_viewers_get_no_action(viewer_client):
    m = outbox_message("m1", "dead")
    assert "Send again…" not in viewer_client.get(f"/outbox/{m.pk}/").content.decode()


def test_an_unknown_message_is_404(viewer_client):
    assert viewer_client.get("/outbox/999999/").status_code == 404
