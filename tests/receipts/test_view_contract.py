"""The Idempotency-Key contract (docs/http-contract.md) asserted once and run against every kind
of view in CONTRACT_VIEWS (tests/receipts/view_kinds_urls.py): a sync function view, an async
function view and an async class-based view handler, each called as it is served (an async view
through Django's AsyncClient, i.e. its ASGI handler). A new kind of view joins by adding its path
there. tests/receipts/test_asgi_live.py runs the async views under uvicorn."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client
from django.utils import timezone

from receipts import store
from receipts.models import Attempt, Receipt
from tests.receipts import urls as test_urls
from tests.receipts.test_decorators import problem_type, rows
from tests.receipts.view_kinds_urls import ASYNC_VIEWS, CONTRACT_VIEWS

pytestmark = [pytest.mark.urls("tests.receipts.view_kinds_urls"), pytest.mark.django_db]


def send(path: str, body: object = None, key: str | None = "k-1", **headers: str):
    """POST as the view is served: an async view through the ASGI handler."""
    if key is not None:
        headers["Idempotency-Key"] = key
    data = body if isinstance(body, bytes) else json.dumps({"amount": 100} if body is None else body)
    if path.split("?")[0] in ASYNC_VIEWS:
        return async_to_sync(AsyncClient().post)(path, data, content_type="application/json", headers=headers)
    return Client().post(path, data, content_type="application/json", headers=headers)


@pytest.fixture(autouse=True)
def _no_hooks():
    test_urls.hooks.clear()
    yield
    test_urls.hooks.clear()


@pytest.fixture(params=CONTRACT_VIEWS)
def view(request) -> str:
    return request.param


def test_a_first_post_runs_once_and_its_repeat_is_replayed_byte_for_byte(view):
    first = send(view)
    again = send(view)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content and again["Content-Type"] == first["Content-Type"]
    assert again["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first
    assert rows("k-1") == 1
    assert Receipt.objects.get().status == "completed"


def test_reusing_a_key_with_another_body_is_422(view):
    send(view)
    reused = send(view, {"amount": 999})
    assert reused.status_code == 422 and problem_type(reused) == "idempotency-key-reused"
    assert rows("k-1") == 1


@pytest.mark.parametrize("key, kind", [(None, "idempotency-key-missing"), ("a, b", "idempotency-key-invalid")])
def test_a_missing_or_malformed_key_is_400_and_runs_nothing(view, key, kind):
    response = send(view, key=key)
    assert response.status_code == 400 and problem_type(response) == kind
    assert not Receipt.objects.exists() and rows("k-1") == 0


def test_a_json_body_that_cannot_be_stored_is_400_and_runs_nothing(view):
    response = send(view, b'{"amount": 1e999999}')
    assert response.status_code == 400 and problem_type(response) == "invalid-json"
    assert not Receipt.objects.exists()


def test_a_body_over_the_upload_limit_is_413_and_runs_nothing(view, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    response = send(view, {"amount": "x" * 100})
    assert response.status_code == 413 and problem_type(response) == "payload-too-large"
    assert not Receipt.objects.exists()


def test_a_second_request_while_the_first_runs_is_409(view):
    seen = {}
    test_urls.hooks["hook"] = lambda: seen.setdefault("busy", send(view))
    assert send(view).status_code == 201
    assert seen["busy"].status_code == 409 and problem_type(seen["busy"]) == "request-in-progress"
    assert int(seen["busy"]["Retry-After"]) >= 1
    assert rows("k-1") == 1


def test_a_5xx_rolls_back_the_views_writes_and_fails_the_receipt(view):
    response = send(view + "?status=503")
    assert response.status_code == 503
    assert rows("k-1") == 0
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.response_status == 503 and receipt.error == "HTTP 503"


def test_an_exception_rolls_back_fails_the_receipt_and_is_raised_again(view):
    with pytest.raises(RuntimeError, match="ledger unreachable"):
        send(view + "?raise=error")
    assert rows("k-1") == 0
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.error == "RuntimeError: ledger unreachable"
    assert json.loads(receipt.response_body)["type"] == "urn:idemdash:problem:internal-error"


def test_an_http404_is_not_stored_and_the_next_attempt_runs(view):
    assert send(view + "?raise=not-found").status_code == 404
    assert rows("k-1") == 0
    assert Receipt.objects.get().error == "Http404: not stored"
    assert send(view + "?raise=not-found").status_code == 404
    assert Receipt.objects.get().attempts == 2


@pytest.mark.parametrize("status", [401, 429])
def test_a_response_that_depends_on_the_caller_is_not_stored(view, status):
    assert send(view + f"?status={status}").status_code == status
    assert send(view + f"?status={status}").status_code == status
    assert "Idempotent-Replayed" not in send(view + f"?status={status}")
    assert Receipt.objects.get().status == "failed"


def test_a_takeover_during_the_view_rolls_back_its_writes_and_answers_409_lease_lost(view):
    with time_machine.travel(timezone.now(), tick=False) as traveller:

        def lease_runs_out_and_another_attempt_takes_over() -> None:
            traveller.shift(timedelta(seconds=31))
            receipt = Receipt.objects.get(key="k-1")
            other = store.claim("anonymous", "k-1", "payment.capture", fingerprint=receipt.fingerprint)
            assert other.outcome == "lease_takeover"

        test_urls.hooks["hook"] = lease_runs_out_and_another_attempt_takes_over
        response = send(view)
    assert response.status_code == 409 and problem_type(response) == "lease-lost"
    # The view's row is gone with its transaction (and, on this one connection, the takeover).
    assert rows("k-1") == 0
    assert Attempt.objects.get(outcome="stale_token").fencing_token == 1


def test_under_hold_a_lapsed_attempt_is_409_outcome_unknown_and_the_view_does_not_run_again(view, settings):
    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"after_crash": "hold"}}
    send(view, key="probe")  # the fingerprint this view's request gets
    fingerprint = Receipt.objects.get(key="probe").fingerprint
    store.claim("anonymous", "k-1", "payment.capture", fingerprint=fingerprint)  # a worker that then died
    with time_machine.travel(timezone.now() + timedelta(seconds=31), tick=False):
        response = send(view)
    assert response.status_code == 409 and problem_type(response) == "outcome-unknown"
    assert "Retry-After" not in response and "Idempotent-Replayed" not in response
    assert rows("k-1") == 0 and Receipt.objects.get(key="k-1").status == "processing"
