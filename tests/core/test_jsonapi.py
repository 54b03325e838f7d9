"""idemdash/core/jsonapi.py's `read_only`, the 405 of the API's read-only views (the front
door `json_api` itself is exercised through every test of the receipts and outbox APIs)."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import RequestFactory

from idemdash.core.jsonapi import read_only
from idemdash.core.problems import CONTENT_TYPE


@read_only("GET", "HEAD")
def page(request):
    return HttpResponse("ok")


def test_read_only_lets_its_methods_through():
    assert page(RequestFactory().get("/api/v1/x")).content == b"ok"
    assert page(RequestFactory().head("/api/v1/x")).status_code == 200


def test_read_only_answers_other_methods_405_as_problem_json_with_allow():
    answer = page(RequestFactory().delete("/api/v1/x"))
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"
    assert answer["Content-Type"] == CONTENT_TYPE
    assert json.loads(answer.content)["type"] == "urn:idemdash:problem:method-not-allowed"


def test_read_only_refuses_an_unsafe_method_when_the_view_is_defined():
    # It exempts the view from CSRF: fine for safe methods only.
    with pytest.raises(ImproperlyConfigured):
        read_only("GET", "POST")
