"""The demo shop's refund route (idemdash/devtools/shop.py): nothing protects it, so a retry
refunds again and the observer counts it as a would-be duplicate."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from receipts import coverage, observe

pytestmark = pytest.mark.django_db

BODY = '{"order": 7, "amount": 500}'


def test_a_retried_refund_is_refunded_twice_and_noted_as_a_would_be_duplicate(client):
    first, again = (client.post("/demo/shop/refunds/", BODY, content_type="application/json") for _ in range(2))
    assert first.status_code == again.status_code == 201
    assert first.json()["refund"] != again.json()["refund"]  # no key: the side effect ran again
    observe.flush()
    assert coverage.unprotected_counts(timezone.now() - timedelta(hours=1)) == {
        ("POST", "demo/shop/refunds/"): {"requests": 2, "duplicates": 1, "skipped": 0}}


def test_it_is_the_demos_one_unprotected_write_route(settings):
    assert settings.ROOT_URLCONF == "idemdash.devtools.urls"
    assert [(r.method, r.path) for r in coverage.routes() if not r.protected] == [("POST", "demo/shop/refunds/")]


def test_it_takes_posts_only(client):
    assert client.get("/demo/shop/refunds/").status_code == 405
