"""GET /api/v1/openapi.json: the OpenAPI 3.1 description of the JSON API, written by hand in
receipts/openapi.json (the views are plain Django) and kept true by tests/receipts/test_openapi.py."""

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


# Public: a client generator fetches it before it has a token.
@read_only("GET", "HEAD")
@cache_control(public=True, max_age=3600)
def openapi_document(request: HttpRequest) -> HttpResponse:
    return HttpResponse(document_bytes(), content_type="application/json")


app_name = "openapi"
urlpatterns = [
    path("", openapi_document, name="document"),
]
