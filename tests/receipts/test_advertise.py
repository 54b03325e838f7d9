"""GET /api/v1/idempotency (receipts/advertise.py): the key's header and form, the wait, and
each protected route's operation with its policy, public and as the OpenAPI description says."""

from __future__ import annotations

import json

import jsonschema
import pytest

from receipts import advertise
from receipts.conf import setting
from receipts.openapi import document_bytes

pytestmark = pytest.mark.urls("tests.dashboard.coverage_urls")  # the project's routes beside a host's


def test_a_caller_without_a_token_learns_the_key_the_wait_and_each_protected_operation(client, settings):
    settings.RECEIPTS_OPERATIONS = {"invoice.*": {"ttl_seconds": 3600, "on_failure": "burn"}}
    response = client.get("/api/v1/idempotency")
    assert response.status_code == 200 and response["Cache-Control"] == "public, max-age=300"
    body = response.json()
    assert (body["header"], body["key"]["max_length"], body["expires_header"]) == (
        "Idempotency-Key", 255, "Idempotency-Key-Expires")
    assert body["wait"]["max_seconds"] == setting("RECEIPTS_MAX_WAIT_SECONDS")
    operations = {op["operation"]: op for op in body["operations"]}
    assert sorted(operations) == ["cart.create", "charge.create", "invoice.create", "order.async_pay", "order.cancel",
                                  "order.create", "subscription.create"]
    assert operations["order.create"]["routes"] == [{"method": "POST", "path": "/shop/orders/"}]
    assert (operations["invoice.create"]["ttl_seconds"], operations["invoice.create"]["on_failure"]) == (3600, "burn")
    assert set(operations["order.create"]) == {"operation", "routes", "ttl_seconds", "lease_seconds", "on_failure",
                                               "after_crash", "fresh_key"}  # not which settings pattern matched
    assert body["fresh_key_window_seconds"] == setting("RECEIPTS_FRESH_KEY_WINDOW_SECONDS")


def test_the_document_is_the_one_the_openapi_description_describes(client):
    description = json.loads(document_bytes())
    schema = {**description["components"]["schemas"]["Advertisement"], "components": description["components"]}
    jsonschema.validate(client.get("/api/v1/idempotency").json(), schema)


def test_only_reading_is_allowed(client):
    response = client.post("/api/v1/idempotency")
    assert response.status_code == 405 and response["Content-Type"] == "application/problem+json"


def test_the_routes_are_read_once_per_urlconf(client):
    advertise._protected_routes.cache_clear()
    client.get("/api/v1/idempotency")
    assert advertise._protected_routes.cache_info().misses == 1
    client.get("/api/v1/idempotency")
    assert advertise._protected_routes.cache_info().hits == 1
