"""GET /api/v1/openapi.json: the OpenAPI 3.1 description of the JSON API (receipts, the
outbox, the stats), served as the package keeps it (receipts/openapi.json).

Written by hand beside the views rather than generated: the views are plain Django (no
framework to derive it from), and tests/receipts/test_openapi.py keeps it true: every route
under /api/v1/ is described, every problem type the API answers is listed, the examples of
docs/json-api.md validate, and Schemathesis finds no answer of a live server that it does
not describe."""

from __future__ import annotations

import functools
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.cache import cache_control

from idemdash.core.jsonapi import read_only

DOCUMENT = Path(__file__).with_name("openapi.json")


@functools.cache
def document_bytes() -> bytes:
    return DOCUMENT.read_bytes()


# Public, like Stripe's: it says nothing a client of the API does not see, and a client
# generator fetches it before it has a token. The bytes never change while the process runs,
# so clients may cache them for an hour.
@read_only("GET", "HEAD")
@cache_control(public=True, max_age=3600)
def openapi_document(request: HttpRequest) -> HttpResponse:
    return HttpResponse(document_bytes(), content_type="application/json")


# Its own one-route URLconf, mounted at that path as the outbox's is at /api/v1/outbox
# (idemdash/urls.py: `path("api/v1/openapi.json", include("receipts.openapi"))`).
app_name = "openapi"
urlpatterns = [
    path("", openapi_document, name="document"),
]
