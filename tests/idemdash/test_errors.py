"""idemdash/errors.py and the error templates: problem+json under /api/ and /webhooks/,
the dashboard's own pages elsewhere."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.template.loader import render_to_string
from django.test import Client, RequestFactory

PROBLEM = "application/problem+json"


def _problem(response) -> dict:
    assert response["Content-Type"] == PROBLEM, response.content[:300]
    body = json.loads(response.content)
    assert body["status"] == response.status_code and body["title"] and body["detail"]
    return body


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize("path", ["/webhooks/a.b/", "/webhooks/", "/webhooks/stripe/extra/", "/webhooks/%C3%A9/"])
def test_an_unmatched_webhook_path_is_a_problem_not_a_page(method, path):
    response = getattr(Client(), method)(path)
    assert response.status_code == 404
    assert _problem(response)["type"] == "urn:idemdash:problem:webhook-endpoint-not-found"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/", "/api/v2/receipts/", "/api/v1/receipts/claim/extra", "/api/v1/nope"])
def test_an_unmatched_api_path_is_a_problem_not_a_page(path):
    response = Client().post(path)
    assert response.status_code == 404
    assert _problem(response)["type"] == "urn:idemdash:problem:not-found"


@pytest.mark.django_db
def test_an_unknown_receipt_is_the_dashboards_404_with_its_navigation(viewer_client):
    response = viewer_client.get("/receipts/987654321/")
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
    html = response.content.decode()
    assert "<h1>Not found</h1>" in html and "css/idemdash.css" in html
    assert 'class="nav"' in html and "vera" in html and "Log out" in html


@pytest.mark.django_db
def test_an_unknown_page_for_a_visitor_is_styled_without_navigation():
    response = Client().get("/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "<h1>Not found</h1>" in html and "css/idemdash.css" in html and 'class="nav"' not in html


# No django_db mark below: any database access while answering would fail the test.


@pytest.fixture
def failing_urls(settings):
    settings.ROOT_URLCONF = "tests.idemdash.error_urls"


@pytest.mark.parametrize("path", ["/api/v1/boom", "/webhooks/boom/x/"])
def test_a_crash_under_the_api_or_webhooks_is_a_problem(failing_urls, path):
    response = Client(raise_request_exception=False).post(path)
    assert response.status_code == 500
    assert _problem(response)["type"] == "urn:idemdash:problem:internal-error"
    assert b"a bug" not in response.content


def test_a_crash_on_a_page_is_the_styled_500_without_the_database_or_the_session(failing_urls):
    client = Client(raise_request_exception=False)
    client.cookies["sessionid"] = "a-session-that-would-need-the-database"
    response = client.get("/boom/")
    assert response.status_code == 500
    html = response.content.decode()
    assert "<h1>Something went wrong</h1>" in html and "css/idemdash.css" in html and "a bug" not in html


def test_a_permission_denied_under_the_api_is_a_problem(failing_urls):
    response = Client().get("/api/v1/forbidden")
    assert response.status_code == 403
    assert _problem(response)["type"] == "urn:idemdash:problem:forbidden"


@pytest.mark.django_db
def test_a_permission_denied_on_a_page_is_the_styled_403(failing_urls):
    response = Client().get("/forbidden/")
    assert response.status_code == 403 and "<h1>Not allowed</h1>" in response.content.decode()


def test_the_503_page_renders_with_a_request_whose_session_is_unreachable():
    request = RequestFactory().get("/receipts/")
    request.COOKIES["sessionid"] = "a-session-that-would-need-the-database"
    SessionMiddleware(lambda r: None).process_request(request)
    AuthenticationMiddleware(lambda r: None).process_request(request)
    html = render_to_string("idemdash/503.html", request=request)
    assert "<h1>Database unavailable</h1>" in html and "css/idemdash.css" in html
    assert 'http-equiv="refresh"' in html and 'class="nav"' not in html


def test_the_503_page_renders_without_any_context():
    assert "<h1>Database unavailable</h1>" in render_to_string("idemdash/503.html")


@pytest.mark.parametrize("template", ["idemdash/404.html", "idemdash/500.html", "idemdash/503.html"])
def test_the_error_pages_render_under_a_urlconf_without_the_dashboard(settings, template):
    # As in a project's own URLconf, or the tests' (a decorated view that raises Http404).
    settings.ROOT_URLCONF = "tests.faults.urls"
    html = render_to_string(template)
    assert "css/idemdash.css" in html and 'class="brand" href="/"' in html
