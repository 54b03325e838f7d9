"""receipts.middleware.DatabaseUnavailableMiddleware: a database that goes away under a request answers 503 with
Retry-After: problem+json for machines, the project's 503.html (or a line of text) for
browsers. The failure is real: PostgreSQL ends the request's backend; SQLite reads a
missing table."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.db import connection
from django.http import HttpResponse
from django.test import AsyncClient

from receipts.middleware import ChunkedBodyMiddleware, DatabaseUnavailableMiddleware, MalformedRequestMiddleware

pytestmark = [pytest.mark.urls("tests.receipts.middleware_urls"), pytest.mark.django_db(transaction=True)]

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


@pytest.fixture(autouse=True)
def _reconnect():
    """The test client skips Django's end-of-request cleanup, which drops a broken
    connection; drop it here, before the test database is flushed."""
    yield
    connection.close()


@pytest.fixture
def templates(settings, tmp_path):
    """The project's templates replaced by tmp_path (empty unless the test writes to it), and
    the app's default name for the 503 page (idemdash's own server names its own)."""
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [tmp_path], "APP_DIRS": False}]
    del settings.RECEIPTS_UNAVAILABLE_TEMPLATE
    return tmp_path


def is_problem(response) -> bool:
    return (
        response["Content-Type"] == "application/problem+json"
        and response.json()["type"] == "urn:idemdash:problem:database-unavailable"
    )


@pytest.mark.parametrize(
    "path, accept",
    [
        ("/orders/", ""),  # curl, SDKs: no Accept
        ("/orders/", "*/*"),
        ("/orders/", "application/json"),
        ("/orders/", "application/json, text/html"),
        ("/api/v1/receipts/claim", BROWSER),  # the JSON API, even from a browser
        ("/webhooks/stripe/", BROWSER),
    ],
)
def test_machines_get_problem_json(client, templates, path, accept):
    (templates / "503.html").write_text("<h1>Down</h1>")
    response = client.post(path, headers={"Accept": accept} if accept else {})
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert is_problem(response)


def test_a_browser_gets_the_projects_503_page(client, templates):
    (templates / "503.html").write_text("<h1>Down for a moment</h1>")
    response = client.get("/receipts/", headers={"Accept": BROWSER})
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response["Content-Type"] == "text/html; charset=utf-8"
    assert response.content == b"<h1>Down for a moment</h1>"


def test_an_htmx_request_is_answered_as_html(client, templates):
    (templates / "503.html").write_text("down")
    response = client.get("/receipts/", headers={"HX-Request": "true"})
    assert response.status_code == 503 and response.content == b"down"


def test_without_a_503_template_a_browser_gets_a_line_of_text(client, templates):
    response = client.get("/receipts/", headers={"Accept": BROWSER})
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert b"database could not be reached" in response.content


def test_a_503_template_that_fails_to_render_still_answers_503(client, templates):
    (templates / "503.html").write_text("{% url 'no-such-view' %}")
    response = client.get("/receipts/", headers={"Accept": BROWSER})
    assert response.status_code == 503 and response["Content-Type"] == "text/plain; charset=utf-8"


def test_the_json_path_prefixes_are_a_setting(client, templates, settings):
    (templates / "503.html").write_text("down")
    settings.RECEIPTS_JSON_PATH_PREFIXES = ["/payments/"]
    assert is_problem(client.post("/payments/capture", headers={"Accept": BROWSER}))
    assert client.post("/api/v1/receipts/claim", headers={"Accept": BROWSER}).content == b"down"


def test_the_503_page_is_a_setting(client, templates, settings):
    (templates / "503.html").write_text("not this one")
    (templates / "mine").mkdir()
    (templates / "mine" / "unavailable.html").write_text("mine")
    settings.RECEIPTS_UNAVAILABLE_TEMPLATE = "mine/unavailable.html"
    assert client.get("/receipts/", headers={"Accept": BROWSER}).content == b"mine"


# --- async stacks (ASGI) ------------------------------------------------------------------

@pytest.mark.parametrize("middleware", [DatabaseUnavailableMiddleware, ChunkedBodyMiddleware, MalformedRequestMiddleware])
def test_each_middleware_takes_the_mode_of_the_handler_after_it(middleware):
    async def async_view(request):
        return HttpResponse()

    assert middleware.sync_capable and middleware.async_capable
    assert iscoroutinefunction(middleware(async_view))
    assert not iscoroutinefunction(middleware(lambda request: HttpResponse()))


def test_an_async_stack_answers_a_lost_database_with_503_too(templates):
    response = async_to_sync(AsyncClient().post)("/orders/")
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert is_problem(response)


def test_an_async_stack_refuses_a_nul_character_with_400():
    response = async_to_sync(AsyncClient().get)("/orders/?q=%00")
    assert response.status_code == 400
    assert response.json()["type"] == "urn:idemdash:problem:invalid-parameter"
