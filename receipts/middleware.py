"""Request middleware for protected requests and the webhook receiver, sync or async alike:
a chunked body read like one with Content-Length, a NUL in the path or query refused with
400, and a 503 with Retry-After, not a 500, when the database goes away."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.core.handlers.wsgi import LimitedStream, WSGIRequest
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template import TemplateDoesNotExist, loader
from django.views import defaults

from idemdash.core.problems import problem
from receipts.conf import setting

log = logging.getLogger(__name__)

READ_STEP = 64 * 1024
RETRY_AFTER = "1"
PLAIN_503 = "Service unavailable: the database could not be reached. Retry shortly.\n"


def wants_html(request: HttpRequest) -> bool:
    """A browser page or an htmx fragment; a client that names JSON, or no type (curl), gets JSON."""
    if request.path.startswith(tuple(setting("RECEIPTS_JSON_PATH_PREFIXES"))):
        return False
    accept = request.headers.get("Accept", "")
    if "json" in accept:
        return False
    return "text/html" in accept or request.headers.get("HX-Request") == "true"


def _html_503() -> HttpResponse:
    name = setting("RECEIPTS_UNAVAILABLE_TEMPLATE")
    try:
        # Without the request, as 500.html is: context processors would read the database.
        body = loader.get_template(name).render()
        content_type = "text/html; charset=utf-8"
    except Exception as exc:  # a template that itself needs the database: still a 503, not a 500
        if not isinstance(exc, TemplateDoesNotExist):
            log.exception("%s could not be rendered", name)
        body, content_type = PLAIN_503, "text/plain; charset=utf-8"
    response = HttpResponse(body, status=503, content_type=content_type)
    response["Retry-After"] = RETRY_AFTER
    return response


class _RequestCheck:
    """A middleware that may answer before the view, in the mode of the handler after it."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        refused = self.refused(request)
        return refused if refused is not None else self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponse:
        refused = self.refused(request)
        return refused if refused is not None else await self.get_response(request)

    def refused(self, request: HttpRequest) -> HttpResponse | None:
        return None


class DatabaseUnavailableMiddleware(_RequestCheck):
    """Answer 503 with Retry-After, not 500, when the database goes away under a request: it is
    transient and every write path is transactional. Machines get problem+json, a browser
    RECEIPTS_UNAVAILABLE_TEMPLATE or a line of text. (Django calls process_exception in either mode.)"""

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, (OperationalError, InterfaceError)):
            return None
        log.warning("database unavailable during %s %s: %s", request.method, request.path, exception)
        if wants_html(request):
            return _html_503()
        return problem(503, "database-unavailable", "Database unavailable",
                       "The database could not be reached; nothing was stored. Retry the request.",
                       headers={"Retry-After": RETRY_AFTER})


class ChunkedBodyMiddleware(_RequestCheck):
    """A `Transfer-Encoding: chunked` body read like any other: Django reads CONTENT_LENGTH
    bytes, so it would read as empty. Where the WSGI server took the chunking off
    (`wsgi.input_terminated`), the body is buffered up to the limit and given its length;
    otherwise the request is answered 411. Broken framing is the client's: 400
    `malformed-body`. Goes before anything that reads the body."""

    def refused(self, request: HttpRequest) -> HttpResponse | None:
        meta = request.META
        if isinstance(request, ASGIRequest):
            if not meta.get("CONTENT_LENGTH"):
                _measure_body(request)
            return None
        if "HTTP_TRANSFER_ENCODING" in meta and not meta.get("CONTENT_LENGTH") and isinstance(request, WSGIRequest):
            if not meta.get("wsgi.input_terminated"):
                return problem(411, "length-required", "Content-Length required",
                               "This server cannot read a chunked request body: send it with a Content-Length.")
            try:
                _buffer_body(request)
            except Exception as exc:  # noqa: BLE001 - the server's own framing errors, whatever its classes
                log.warning("malformed request body on %s %s: %s: %s", request.method, request.path,
                            type(exc).__name__, exc)
                return problem(400, "malformed-body", "Malformed request body",
                               "The request body's framing could not be read (chunked encoding): nothing was done.")
        return None


NUL = "\x00"


class MalformedRequestMiddleware(_RequestCheck):
    """A NUL character in the query string or the path, refused with 400 before any view: any
    parameter that reached a query would be a 500 on PostgreSQL, whose text cannot hold it."""

    def refused(self, request: HttpRequest) -> HttpResponse | None:
        query = request.META.get("QUERY_STRING", "")
        if NUL in request.path or "%00" in query or NUL in query:
            log.warning("NUL character refused in %s %s", request.method, request.path.replace(NUL, "\\x00"))
            if request.headers.get("HX-Request") == "true":
                # Not a fragment for the element htmx would swap: left in place, and the page
                # told why (static/js/idemdash.js shows it beside the form and marks what it updates stale).
                refused = {"idemdash:refused": {"message": "A NUL character is not accepted in a filter or a query "
                                                           "parameter: nothing was filtered."}}
                return HttpResponse(status=400, headers={"HX-Reswap": "none", "HX-Push-Url": "false",
                                                         "HX-Trigger": json.dumps(refused)})
            if wants_html(request):
                return defaults.bad_request(request, ValueError("NUL character"))
            return problem(400, "invalid-parameter", "NUL character in the request",
                           "A NUL character (%00) is not accepted in a path or a query parameter.")
        return None


def body_limit() -> int | None:
    """The most any view here reads (None: no limit, as Django's own setting allows)."""
    upload = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if upload is None:
        return None
    return max(upload, getattr(settings, "WEBHOOKS_MAX_BODY_BYTES", 0))


def _measure_body(request: ASGIRequest) -> None:
    """Under ASGI give the spooled body its length, so that Django's size limit applies to it."""
    body = request._stream
    if not getattr(body, "seekable", lambda: False)():
        return  # not the server's spooled file: a test client's payload, sent with its length
    size = body.seek(0, io.SEEK_END)
    body.seek(0)
    request.META["CONTENT_LENGTH"] = str(size)


def _buffer_body(request: WSGIRequest) -> None:
    """Read the de-chunked input to its end, or to one byte past the limit (still "too large")."""
    limit = body_limit()
    stream = request.META["wsgi.input"]
    parts = []
    size = 0
    while limit is None or size <= limit:
        part = stream.read(READ_STEP if limit is None else min(READ_STEP, limit + 1 - size))
        if not part:
            break
        parts.append(part)
        size += len(part)
    body = b"".join(parts)
    request.META["CONTENT_LENGTH"] = str(len(body))
    request._stream = LimitedStream(io.BytesIO(body), len(body))
