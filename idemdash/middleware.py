"""Answer 503, not 500, when the database goes away under a request.

A lost connection (server restart, failover, `pg_terminate_backend`) is transient: the
client should retry, and because every write path here is transactional, nothing was half
written. Django closes the broken connection at the end of the request, so the next
request reconnects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from receipts.problems import problem

log = logging.getLogger(__name__)


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        log.warning("database unavailable during %s %s: %s", request.method, request.path, exception)
        return problem(
            503,
            "database-unavailable",
            "Database unavailable",
            "The database could not be reached; nothing was stored. Retry the request.",
            headers={"Retry-After": "1"},
        )
