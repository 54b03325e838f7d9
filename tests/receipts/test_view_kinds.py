"""Each kind of Django and DRF view behind the Idempotency-Key contract ("Each kind of view" in
docs/http-contract.md), in-process against the test database; tests/receipts/test_drf_host_project.py
serves a host DRF project with gunicorn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.test import AsyncClient, Client
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework import viewsets
from rest_framework.decorators import api_view
from rest_framework.response import Response
from rest_framework.views import APIView

from receipts import drf, responses
from receipts.checks import idempotent_on_dispatch
from receipts.decorators import idempotent
from receipts.models import Receipt
from tests.receipts.test_decorators import problem_type, rows
from tests.receipts.view_kinds_urls import AsyncOnDispatch, CaptureOnDispatch

pytestmark = pytest.mark.urls("tests.receipts.view_kinds_urls")

ROOT = Path(__file__).resolve().parents[2]

DRF_VIEWS = [
    ("post", "/api-function"),
    ("post", "/api-function-drf"),
    ("post", "/api-view"),
    ("post", "/api-view-method-decorator"),
    ("post", "/orders"),
    ("patch", "/orders/7"),
]


def send(client: Client, method: str, path: str, key: str | None = "k-1", **headers: str):
    if key is not None:
        headers["Idempotency-Key"] = key
    return getattr(client, method)(path, json.dumps({"amount": 100}), content_type="application/json", headers=headers)


def bearer(user) -> dict[str, str]:
    return {"Authorization": f"Bearer jwt.{user.username}"}


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


@pytest.fixture
def bob(django_user_model):
    return django_user_model.objects.create_user("bob")


# --- Django views -------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize(
    "path, content_type",
    [
        ("/template", "text/html; charset=utf-8"),
        ("/cbv-dispatch", "application/json"),
        ("/cbv-post", "application/json"),
    ],
)
def test_a_django_view_of_each_kind_runs_once_and_replays_byte_for_byte(client, path, content_type):
    first = send(client, "post", path)
    again = send(client, "post", path)
    assert first.status_code == again.status_code == 201
    assert first["Content-Type"] == again["Content-Type"] == content_type
    assert again.content == first.content and b"row" in first.content
    assert again["Idempotent-Replayed"] == "true"
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_a_template_response_is_stored_rendered(client):
    first = send(client, "post", "/template")
    assert Receipt.objects.get().response_body == first.content.decode() == f"<p>row {first.context_data['row']} for AnonymousUser</p>\n"


@pytest.mark.django_db
def test_a_file_response_is_passed_through_and_not_stored(client):
    first = send(client, "post", "/file")
    assert b"".join(first.streaming_content) == b"file body"
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.error == "streaming response"
    assert "Idempotent-Replayed" not in send(client, "post", "/file")
    assert rows("k-1") == 2


@pytest.mark.django_db
def test_a_class_based_view_is_scoped_to_the_logged_in_user(client, alice):
    client.force_login(alice)
    send(client, "post", "/cbv-post")
    assert Receipt.objects.get().scope == f"user:{alice.pk}"


# --- DRF views: rendering and replay ------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("method, path", DRF_VIEWS)
def test_a_drf_view_of_each_kind_renders_stores_and_replays_byte_for_byte(client, alice, method, path):
    first = send(client, method, path, **bearer(alice))
    assert first.status_code == 201, first.content
    assert first["Content-Type"] == "application/json"
    assert first.json()["user"] == "alice"
    again = send(client, method, path, **bearer(alice))
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.content == first.content and again["Content-Type"] == first["Content-Type"]
    assert (again["Allow"], again["Vary"]) == (first["Allow"], first["Vary"])  # DRF's own headers
    receipt = Receipt.objects.get()
    assert receipt.status == "completed"
    assert responses.decode(receipt.response_body) == (first.content, {"Vary": "Accept", "Allow": first["Allow"]})
    assert rows("k-1") == 1


@pytest.mark.django_db
@pytest.mark.parametrize("method, path", DRF_VIEWS)
def test_a_drf_view_answers_the_documented_problems(client, alice, method, path):
    assert problem_type(send(client, method, path, key=None, **bearer(alice))) == "idempotency-key-missing"
    send(client, method, path, **bearer(alice))
    reused = getattr(client, method)(
        path, json.dumps({"amount": 5}), content_type="application/json", headers={"Idempotency-Key": "k-1", **bearer(alice)}
    )
    assert reused.status_code == 422 and problem_type(reused) == "idempotency-key-reused"


# --- DRF views: the scope is DRF's authenticated caller -----------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("method, path", DRF_VIEWS)
def test_two_drf_users_with_the_same_key_each_run_once_and_see_only_their_own_response(client, alice, bob, method, path):
    for_alice = send(client, method, path, **bearer(alice))
    for_bob = send(client, method, path, **bearer(bob))
    assert "Idempotent-Replayed" not in for_bob
    assert for_alice.json()["user"] == "alice" and for_bob.json()["user"] == "bob"
    assert rows("k-1") == 2
    assert send(client, method, path, **bearer(bob)).content == for_bob.content
    assert send(client, method, path, **bearer(alice)).content == for_alice.content
    assert set(Receipt.objects.values_list("scope", flat=True)) == {f"user:{alice.pk}", f"user:{bob.pk}"}


@pytest.mark.django_db
def test_a_drf_session_user_is_the_scope(client, alice):
    client.force_login(alice)
    assert send(client, "post", "/api-view").json()["user"] == "alice"
    assert Receipt.objects.get().scope == f"user:{alice.pk}"


@pytest.mark.django_db
def test_a_caller_drf_does_not_authenticate_is_anonymous(client):
    assert send(client, "post", "/api-view").json()["user"] == "AnonymousUser"
    assert Receipt.objects.get().scope == "anonymous"


@pytest.mark.django_db
def test_a_bearer_token_drf_refuses_is_a_401_and_claims_nothing(client):
    response = send(client, "post", "/api-view", Authorization="Bearer jwt.nobody")
    assert response.status_code == 401
    assert not Receipt.objects.exists()


# --- DRF views: responses and exceptions --------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("method, path", DRF_VIEWS)
@pytest.mark.parametrize(
    "raised, status",
    [("validation", 400), ("not-authenticated", 401), ("permission", 403), ("not-found", 404), ("throttled", 429)],
)
def test_a_drf_client_error_raised_by_the_view_is_not_stored_and_rolls_back(client, alice, method, path, raised, status):
    target = f"{path}?raise={raised}"
    first = send(client, method, target, **bearer(alice))
    assert first.status_code == status and first["Content-Type"] == "application/json"
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.response_status is None
    assert receipt.error.endswith(": not stored")
    assert rows("k-1") == 0
    again = send(client, method, target, **bearer(alice))
    assert again.status_code == status and "Idempotent-Replayed" not in again
    assert Receipt.objects.get().attempts == 2


@pytest.mark.django_db
def test_a_drf_server_error_raised_by_the_view_fails_the_receipt(client, alice):
    first = send(client, "post", "/api-view?raise=server", **bearer(alice))
    assert first.status_code == 500
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.error.startswith("APIException")
    assert json.loads(receipt.response_body)["type"] == "urn:idemdash:problem:internal-error"
    assert rows("k-1") == 0


@pytest.mark.django_db
@pytest.mark.parametrize("status", [401, 403, 429])
def test_a_drf_response_that_depends_on_the_caller_is_not_stored(client, alice, status):
    assert send(client, "post", f"/api-view?status={status}", **bearer(alice)).status_code == status
    assert Receipt.objects.get().response_status is None
    assert "Idempotent-Replayed" not in send(client, "post", f"/api-view?status={status}", **bearer(alice))


@pytest.mark.django_db
def test_a_drf_400_response_the_view_returns_is_stored_and_replayed(client, alice):
    first = send(client, "post", "/api-view?status=400", **bearer(alice))
    again = send(client, "post", "/api-view?status=400", **bearer(alice))
    assert again.status_code == 400 and again["Idempotent-Replayed"] == "true" and again.content == first.content


# --- orders that cannot work fail loudly --------------------------------------------------

def _handler(request):
    return Response({})


class _Handlers(viewsets.ViewSet):
    def create(self, request):
        return Response({})


@pytest.mark.parametrize(
    "decorate",
    [
        pytest.param(lambda: idempotent("payment.capture")(api_view(["POST"])(_handler)), id="idempotent above api_view"),
        pytest.param(lambda: drf.idempotent("payment.capture")(api_view(["POST"])(_handler)), id="drf.idempotent above api_view"),
        pytest.param(lambda: idempotent("payment.capture")(APIView.as_view()), id="idempotent around APIView.as_view"),
        pytest.param(lambda: idempotent("payment.capture")(_Handlers.as_view({"post": "create"})), id="idempotent around ViewSet.as_view"),
    ],
)
def test_idempotent_outside_drf_is_refused_at_import_with_the_right_order(decorate):
    with pytest.raises(ImproperlyConfigured, match="below @api_view, or decorate the APIView/ViewSet method"):
        decorate()


def test_idempotent_on_a_method_without_method_decorator_is_refused_at_import():
    with pytest.raises(ImproperlyConfigured, match="method_decorator"):
        idempotent("payment.capture")(_Handlers.create)


@pytest.mark.django_db
def test_idempotent_on_an_apiviews_dispatch_is_refused_before_anything_is_claimed(client, alice):
    with pytest.raises(ImproperlyConfigured, match="before DRF authenticates the caller"):
        send(client, "post", "/api-view-on-dispatch", **bearer(alice))
    assert not Receipt.objects.exists() and rows("k-1") == 0


# --- async views ---------------------------------------------------------------------------

def test_idempotent_on_an_async_view_is_an_async_view_for_django():
    async def view(request):
        return HttpResponse()

    class Handlers(View):
        @method_decorator(idempotent("payment.capture"))
        async def post(self, request):
            return HttpResponse()

    assert iscoroutinefunction(idempotent("payment.capture")(view))
    assert Handlers.view_is_async and iscoroutinefunction(Handlers.as_view())


@pytest.mark.django_db
def test_idempotent_on_an_async_views_dispatch_is_refused_before_anything_is_claimed():
    with pytest.raises(ImproperlyConfigured, match="Decorate the handler method instead"):
        async_to_sync(AsyncClient().post)("/async-cbv-dispatch", {}, headers={"Idempotency-Key": "k-1"})
    assert not Receipt.objects.exists() and rows("k-1") == 0


def _hides_that_it_is_async(view):
    """A decorator written for sync views around an async one: its wrapper is a plain def."""
    def wrapper(request, *args, **kwargs):
        return view(request, *args, **kwargs)
    return wrapper


@pytest.mark.django_db
def test_a_sync_wrapper_hiding_an_async_view_is_refused_and_the_key_given_back(rf):
    @idempotent("payment.capture")
    @_hides_that_it_is_async
    async def view(request):
        return HttpResponse(status=201)

    request = rf.post("/x", {}, headers={"Idempotency-Key": "k-1"})
    with pytest.raises(ImproperlyConfigured, match="markcoroutinefunction"):
        view(request)
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.response_status is None


@pytest.mark.django_db
def test_a_wrapper_marked_as_a_coroutine_function_is_served_as_async(rf):
    @idempotent("payment.capture")
    @markcoroutinefunction
    @_hides_that_it_is_async
    async def view(request):
        return HttpResponse(b"done", status=201)

    request = rf.post("/x", {}, headers={"Idempotency-Key": "k-1"})
    assert async_to_sync(view)(request).content == b"done"
    assert Receipt.objects.get().status == "completed"


@pytest.mark.urls("tests.receipts.view_kinds_urls")
def test_the_system_check_names_an_async_view_whose_dispatch_is_decorated():
    errors = [e for e in idempotent_on_dispatch() if e.id == "receipts.E005"]
    assert [(e.id, e.obj) for e in errors] == [("receipts.E005", AsyncOnDispatch)]
    assert "async def post" in errors[0].hint


# --- DRF stays optional -------------------------------------------------------------------

@pytest.mark.slow
def test_no_module_of_the_app_but_receipts_drf_imports_drf():
    code = (
        "import django, pkgutil, importlib, sys; django.setup(); import receipts;"
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(receipts.__path__, 'receipts.')"
        " if m.name != 'receipts.drf' and '.migrations' not in m.name];"
        "print(sorted(n for n in sys.modules if n.startswith('rest_framework')))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "idemdash.settings"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.urls("tests.receipts.view_kinds_urls")
def test_the_system_check_names_an_apiview_whose_dispatch_is_decorated():
    errors = [e for e in idempotent_on_dispatch() if e.id == "receipts.E001"]
    assert [(e.id, e.obj) for e in errors] == [("receipts.E001", CaptureOnDispatch)]
    assert "receipts.drf.idempotent" in errors[0].hint


@pytest.mark.urls("tests.receipts.urls")
def test_the_system_check_passes_views_placed_as_the_docs_say():
    assert idempotent_on_dispatch() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cancelled", ["while its key is claimed", "while the view runs"])
def test_an_async_view_whose_client_goes_away_gives_its_key_back_and_keeps_nothing(monkeypatch, cancelled):
    """A client gone mid-request cancels the async view's task (Django's ASGI handler does on
    http.disconnect). The step in its thread runs to its end either way; cancelled while the
    claim's step ran, the key must still be given back, not held until its lease runs out."""
    import asyncio
    import threading

    from receipts import store

    at_claim, view_started, go = threading.Event(), threading.Event(), threading.Event()
    claim = store.claim

    def claim_then_hold(*args, **kwargs):
        result = claim(*args, **kwargs)
        if cancelled == "while its key is claimed":
            at_claim.set()  # committed; its step has not returned to the view yet
            go.wait(30)
        return result

    monkeypatch.setattr(store, "claim", claim_then_hold)
    monkeypatch.setattr("tests.receipts.view_kinds_urls.hooks", {"hook": lambda: (view_started.set(), go.wait(30))})

    async def main() -> None:
        request = asyncio.ensure_future(
            AsyncClient().post("/async-function", {"amount": 5}, content_type="application/json",
                               headers={"Idempotency-Key": "gone"}))
        reached = at_claim if cancelled == "while its key is claimed" else view_started
        assert await asyncio.to_thread(reached.wait, 30)
        request.cancel()
        go.set()
        try:
            await request
        except asyncio.CancelledError:
            pass

    async_to_sync(main)()
    receipt = Receipt.objects.get(key="gone")
    assert receipt.status == "failed" and receipt.released_at is not None, (receipt.status, receipt.released_at)
    assert "CancelledError" in receipt.release_reason
    if cancelled == "while the view runs":
        assert rows("gone") == 0  # its write rolled back with it
