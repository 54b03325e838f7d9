from __future__ import annotations

import pytest
import time_machine
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


# --- the lockout (django-axes, settings.py "Security") -------------------------------------------

LIMIT = 5  # LOGIN_FAILURE_LIMIT's default


def _login(path: str, password: str, address: str, username: str = "vera"):
    return Client().post(path, {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_after_the_limit_the_username_is_locked_out_from_that_address_with_a_page(viewer, admin_user, path):
    username = "vera" if path == "/accounts/login/" else "admin"
    for _ in range(LIMIT - 1):
        refused = _login(path, "wrong", "198.51.100.60", username)
        assert refused.status_code == 200  # the form again, with its message
    # The last failure allowed is answered with the lockout page, and so is the right password.
    assert _login(path, "wrong", "198.51.100.60", username).status_code == 429
    locked = _login(path, "pw-vera" if username == "vera" else "password", "198.51.100.60", username)
    assert locked.status_code == 429
    assert b"Too many failed logins" in locked.content and f"as <strong>{username}</strong>".encode() in locked.content
    assert b"15 min" in locked.content
    assert "_auth_user_id" not in locked.wsgi_request.session


def test_the_lockout_is_per_username_and_address(viewer, operator):
    for _ in range(LIMIT):
        _login("/accounts/login/", "wrong", "198.51.100.61")
    assert _login("/accounts/login/", "pw-vera", "198.51.100.61").status_code == 429
    # The same account from another address, another account from the same one: not locked.
    assert _login("/accounts/login/", "pw-vera", "198.51.100.62").status_code == 302
    assert _login("/accounts/login/", "pw-otto", "198.51.100.61", username="otto").status_code == 302


def test_a_username_longer_than_axes_keeps_is_counted_and_locked_out_by_its_first_255_characters(viewer):
    """Django 6.1's login form authenticates it whatever its length; axes stored it whole
    (a 500 on PostgreSQL, varchar(255))."""
    long_name = "x" * 300
    for _ in range(LIMIT - 1):
        assert _login("/accounts/login/", "wrong", "198.51.100.64", long_name).status_code == 200
    assert _login("/accounts/login/", "wrong", "198.51.100.64", long_name).status_code == 429
    assert _login("/accounts/login/", "wrong", "198.51.100.64", "x" * 255 + "y" * 45).status_code == 429


def test_a_successful_login_starts_the_count_again(viewer):
    for _ in range(LIMIT - 1):
        _login("/accounts/login/", "wrong", "198.51.100.63")
    assert _login("/accounts/login/", "pw-vera", "198.51.100.63").status_code == 302
    for _ in range(LIMIT - 1):
        assert _login("/accounts/login/", "wrong", "198.51.100.63").status_code == 200
    assert _login("/accounts/login/", "pw-vera", "198.51.100.63").status_code == 302


def test_the_lockout_ends_after_its_minutes_and_a_failure_meanwhile_starts_them_again(viewer):
    with time_machine.travel("2026-11-25 12:00:00", tick=False):
        for _ in range(LIMIT):
            _login("/accounts/login/", "wrong", "198.51.100.64")
    with time_machine.travel("2026-11-25 12:10:00", tick=False):
        assert _login("/accounts/login/", "wrong", "198.51.100.64").status_code == 429
    with time_machine.travel("2026-11-25 12:24:59", tick=False):
        assert _login("/accounts/login/", "wrong", "198.51.100.64").status_code == 429
    with time_machine.travel("2026-11-25 12:39:58", tick=False):
        assert _login("/accounts/login/", "pw-vera", "198.51.100.64").status_code == 429
    with time_machine.travel("2026-11-25 12:55:00", tick=False):
        assert _login("/accounts/login/", "pw-vera", "198.51.100.64").status_code == 302
