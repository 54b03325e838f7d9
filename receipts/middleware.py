"""Answer 503, not 500, when the database goes away under a request.

A lost connection (server restart, failover, `pg_terminate_backend`) is transient: the
client should retry, and because every write path here is transactional, nothing was half
written. Django closes the broken connection at the end of the request, so the next
request reconnects.

Machines get `application/problem+json` (the JSON API, the webhook receiver, a protected
view called by a client that does not ask for HTML); a browser gets the project's
`503.html` if it has one, else a line of text. Either way with Retry-After.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template import TemplateDoesNotExist, loader

from receipts.conf import setting
from receipts.problems import problem

log = logging.getLogger(__name__)

RETRY_AFTER = "1"
PLAIN_503 = "Service unavailable: the database could not be reached. Retry shortly.\n"


def wants_html(request: HttpRequest) -> bool:
    """A browser page or an htmx fragment, as opposed to an API client. A client that
    names JSON, or sends no Accept or `*/*` (curl, SDKs), gets JSON."""
    if request.path.startswith(tuple(setting("RECEIPTS_JSON_PATH_PREFIXES"))):
        return False
    accept = request.headers.get("Accept", "")
    if "json" in accept:
        return False
    return "text/html" in accept or request.headers.get("HX-Request") == "true"


def _html_503() -> HttpResponse:
    try:
        # Rendered without the request, as Django renders 500.html: context processors
        # (the user, the session) would read the database that just went away.
        body = loader.get_template("503.html").render()
        content_type = "text/html; charset=utf-8"
    except TemplateDoesNotExist:
        body, content_type = PLAIN_503, "text/plain; charset=utf-8"
    except Exception:  # a template that itself needs the database: still a 503, not a 500
        log.exception("503.html could not be rendered")
        body, content_type = PLAIN_503, "text/plain; charset=utf-8"
    response = HttpResponse(body, status=503, content_type=content_type)
    response["Retry-After"] = RETRY_AFTER
    return response


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        log.warning("database unavailable during %s %s: %s", request.method, request.path, exception)
        if wants_html(request):
            return _html_503()
        return problem(
            503,
            "database-unavailable",
            "Database unavailable",
            "The database could not be reached; nothing was stored. Retry the request.",
            headers={"Retry-After": RETRY_AFTER},
        )
