from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db

PAGES = ["/", "/receipts/", "/receipts/bulk-release/", "/stuck/", "/audit/"]


@pytest.mark.parametrize("url", PAGES)
def test_every_page_sends_anonymous_visitors_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("url", PAGES)
def test_a_logged_in_account_outside_both_groups_gets_403(outsider_client, url):
    response = outsider_client.get(url)
    assert response.status_code == 403
    assert b"operators" in response.content  # the styled page says what to ask for


def test_the_login_page_is_styled_like_the_dashboard(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b"/static/css/idemdash.css" in response.content
    assert b'name="csrfmiddlewaretoken"' in response.content


def test_logging_in_leads_to_the_overview(viewer):
    c = Client(enforce_csrf_checks=False)
    response = c.post("/accounts/login/", {"username": "vera", "password": "pw-vera"}, follow=True)
    assert response.redirect_chain[-1][0] == "/"
    assert response.status_code == 200


def test_a_wrong_password_is_refused_with_a_message(viewer, client):
    response = client.post("/accounts/login/", {"username": "vera", "password": "nope"})
    assert response.status_code == 200
    assert b"do not match" in response.content


def test_logout_is_a_post(viewer_client):
    assert viewer_client.get("/accounts/logout/").status_code == 405
    assert viewer_client.post("/accounts/logout/").status_code == 302
    assert viewer_client.get("/").status_code == 302


def test_an_htmx_poll_after_the_session_ended_is_sent_to_the_login_page_whole(client):
    response = client.get("/?window=1h", headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/?window=1h"})
    assert response.status_code == 200
    assert response["HX-Redirect"] == "/accounts/login/?next=%2F%3Fwindow%3D1h"
