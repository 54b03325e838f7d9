"""Request bodies sent with `Transfer-Encoding: chunked`, read like any other.

Django's WSGIRequest reads CONTENT_LENGTH bytes of the body, and a chunked request has no
Content-Length, so its body reads as empty: a decorated view would run (and fingerprint)
an empty body, no size limit would apply, and a valid webhook would fail its signature.

A WSGI server that has taken the chunking off says so with `wsgi.input_terminated`
(gunicorn always; mod_wsgi and Werkzeug for chunked requests): its input then ends where
the body ends. This reads it, at most one byte past the largest body any view here takes,
and hands Django the body with its length, so every reader and size limit (the 413s) works
on it as on a body sent with Content-Length. A server that leaves the chunked framing on
the socket (Django's runserver, wsgiref) gives no way to find the body's end: the request
is answered 411 Length Required, never run on an empty body.

Goes near the top of MIDDLEWARE, before anything that reads the body (CsrfViewMiddleware
reads POST forms). Requests with a Content-Length pay one dictionary lookup.
"""

from __future__ import annotations

import io
from collections.abc import Callable

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream, WSGIRequest
from django.http import HttpRequest, HttpResponse

from receipts.problems import problem

READ_STEP = 64 * 1024


class ChunkedBodyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        if "HTTP_TRANSFER_ENCODING" in meta and not meta.get("CONTENT_LENGTH") and isinstance(request, WSGIRequest):
            if not meta.get("wsgi.input_terminated"):
                return problem(
                    411,
                    "length-required",
                    "Content-Length required",
                    "This server cannot read a chunked request body: send it with a Content-Length.",
                )
            _buffer_body(request)
        return self.get_response(request)


def body_limit() -> int | None:
    """The most any view here reads (None: no limit, as Django's own setting allows)."""
    upload = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if upload is None:
        return None
    return max(upload, getattr(settings, "WEBHOOKS_MAX_BODY_BYTES", 0))


def _buffer_body(request: WSGIRequest) -> None:
    """Read the de-chunked input to its end, or to one byte past the limit: a body cut
    there still says "too large" through its length, and the server drains the rest."""
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
