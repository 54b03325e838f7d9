"""receipts.ninja: the Idempotency-Key contract on Django Ninja operations, in-process
(tests/receipts/ninja_urls.py); tests/receipts/test_ninja_host_project.py serves a Ninja host
project with gunicorn."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, Client
from ninja import NinjaAPI

from receipts import decorators, ninja, responses, store
from receipts.fingerprint import fingerprint_http
from receipts.models import Receipt
from tests.receipts.test_decorators import problem_type, rows
from tests.receipts.test_view_kinds import alice, bearer, bob  # noqa: F401 - fixtures

pytestmark = pytest.mark.urls("tests.receipts.ninja_urls")

BIG = 2_621_440 + 1  # one byte over Django's DATA_UPLOAD_MAX_MEMORY_SIZE


def send(client: Client, path: str = "/api/orders", key: str | None = "k-1", amount: int = 100, *,
         method: str = "post", body: bytes | None = None, **headers: str):
    if key is not None:
        headers["Idempotency-Key"] = key
    data = body if body is not None else json.dumps({"amount": amount})
    return client.generic(method.upper(), path, data, content_type="application/json", headers=headers)


# --- rendering and replay -----------------------------------------------------------------

@pytest.mark.django_db
def test_an_operation_runs_once_and_replays_its_schema_rendering_and_status_byte_for_byte(client, alice):
    first = send(client, **bearer(alice))
    assert first.status_code == 201, first.content
    assert first.json() == {"order": first.json()["order"], "amount": 100, "caller": "alice"}
    again = send(client, **bearer(alice))
    assert again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert again.content == first.content and again["Content-Type"] == first["Content-Type"] == "application/json; charset=utf-8"
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.scope, receipt.response_status) == ("completed", f"user:{alice.pk}", 201)
    assert responses.decode(receipt.response_body)[0] == first.content
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_headers_and_cookies_set_on_ninjas_response_are_stored_and_replayed(client, alice):
    first = send(client, "/api/orders/7", method="put", **bearer(alice))
    assert first.status_code == 200 and first["X-Order"] == "7" and first.cookies["last-order"].value == "7"
    again = send(client, "/api/orders/7", method="put", **bearer(alice))
    assert again["Idempotent-Replayed"] == "true" and again.content == first.content
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_an_operation_answers_the_documented_problems(client, alice):
    assert problem_type(send(client, key=None, **bearer(alice))) == "idempotency-key-missing"
    assert problem_type(send(client, key="a,b", **bearer(alice))) == "idempotency-key-invalid"
    send(client, **bearer(alice))
    reused = send(client, amount=5, **bearer(alice))
    assert reused.status_code == 422 and problem_type(reused) == "idempotency-key-reused"
    nan = send(client, "/api/router/raw", key="k-nan", body=b'{"amount": NaN}')
    assert nan.status_code == 400 and problem_type(nan) == "invalid-json"
    assert rows("k-1") == 1 and rows("k-nan") == 0


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/orders", "/api/router/raw"])
def test_a_body_over_the_upload_limit_is_the_contracts_413_with_or_without_a_body_parameter(client, alice, path):
    response = send(client, path, body=b"x" * BIG, **bearer(alice))
    assert response.status_code == 413 and problem_type(response) == "payload-too-large"
    assert not Receipt.objects.exists()


@pytest.mark.django_db
def test_a_request_in_progress_is_409(client, alice):
    body = json.dumps({"amount": 100}).encode()
    fingerprint = fingerprint_http("POST", "/api/orders", body, "application/json", json.loads(body))
    store.claim(f"user:{alice.pk}", "k-1", "order.create", fingerprint=fingerprint)
    response = send(client, **bearer(alice))
    assert response.status_code == 409 and problem_type(response) == "request-in-progress"
    assert rows("k-1") == 0


@pytest.mark.django_db
def test_a_body_ninja_refuses_is_its_own_422_and_claims_nothing(client, alice):
    response = send(client, body=b'{"amount": "lots"}', **bearer(alice))
    assert response.status_code == 422 and "detail" in response.json()
    assert not Receipt.objects.exists()


@pytest.mark.django_db
def test_an_unauthenticated_call_is_ninjas_401_and_claims_nothing(client):
    assert send(client).status_code == 401
    assert send(client, Authorization="Bearer jwt.nobody").status_code == 401
    assert not Receipt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("raised, status", [("not-found", 404), ("forbidden", 403)])
def test_an_http_error_raised_by_the_operation_is_not_stored_and_rolls_back(client, alice, raised, status):
    first = send(client, f"/api/orders?raise={raised}", **bearer(alice))
    assert first.status_code == status
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.error.endswith(": not stored")
    assert rows("k-1") == 0
    again = send(client, f"/api/orders?raise={raised}", **bearer(alice))
    assert again.status_code == status and "Idempotent-Replayed" not in again


@pytest.mark.django_db
def test_a_server_error_raised_by_the_operation_fails_the_receipt_and_rolls_back():
    from django.contrib.auth.models import User

    alice = User.objects.create_user("alice")
    client = Client(raise_request_exception=False)
    assert send(client, "/api/orders?raise=server", **bearer(alice)).status_code == 500
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.error == "RuntimeError: boom"
    assert rows("k-1") == 0


# --- the scope is the caller Ninja authenticated ------------------------------------------

@pytest.mark.django_db
def test_two_users_with_the_same_key_each_run_once_and_see_only_their_own_order(client, alice, bob):
    for_alice = send(client, **bearer(alice))
    for_bob = send(client, **bearer(bob))
    assert "Idempotent-Replayed" not in for_bob
    assert (for_alice.json()["caller"], for_bob.json()["caller"]) == ("alice", "bob")
    assert send(client, **bearer(bob)).content == for_bob.content
    assert send(client, **bearer(alice)).content == for_alice.content
    assert rows("k-1") == 2
    assert set(Receipt.objects.values_list("scope", flat=True)) == {f"user:{alice.pk}", f"user:{bob.pk}"}


@pytest.mark.django_db
def test_an_async_operation_is_scoped_by_its_caller_and_replays_byte_for_byte(alice, bob):
    def post(user, amount=100):
        return async_to_sync(AsyncClient().post)(
            "/api/async-orders", json.dumps({"amount": amount}), content_type="application/json",
            headers={"Idempotency-Key": "k-1", **bearer(user)},
        )

    for_alice, for_bob = post(alice), post(bob)
    assert for_alice.status_code == for_bob.status_code == 201
    assert (for_alice.json()["caller"], for_bob.json()["caller"]) == ("alice", "bob")
    again = post(alice)
    assert again["Idempotent-Replayed"] == "true" and again.content == for_alice.content
    assert post(alice, amount=5).status_code == 422
    assert rows("k-1") == 2
    assert set(Receipt.objects.values_list("scope", flat=True)) == {f"user:{alice.pk}", f"user:{bob.pk}"}


@pytest.mark.django_db
def test_a_session_user_through_django_auth_is_the_scope(client, alice):
    client.force_login(alice)
    csrf = Client(enforce_csrf_checks=False)
    csrf.force_login(alice)
    assert send(csrf).json()["caller"] == "alice"
    assert Receipt.objects.get().scope == f"user:{alice.pk}"


@pytest.mark.django_db
def test_an_api_key_returned_as_auth_is_scoped_by_its_hash_never_stored_in_clear(client):
    first = send(client, "/api/orders-keyed", **{"X-API-Key": "key-alice-secret"})
    other = send(client, "/api/orders-keyed", **{"X-API-Key": "key-bob-secret"})
    assert first.status_code == other.status_code == 201
    assert "Idempotent-Replayed" not in other and rows("k-1") == 2
    assert send(client, "/api/orders-keyed", **{"X-API-Key": "key-alice-secret"}).content == first.content
    scopes = list(Receipt.objects.values_list("scope", flat=True))
    assert len(set(scopes)) == 2 and all(s.startswith("credential:") for s in scopes)
    for receipt in Receipt.objects.all():
        assert "secret" not in json.dumps([receipt.scope, receipt.request, receipt.response_body, receipt.session_id])


@pytest.mark.django_db
def test_an_auth_object_names_its_scope_through_idempotency_scope(client):
    send(client, "/api/orders-tenant", Authorization="Bearer tenant.acme")
    assert Receipt.objects.get().scope == "tenant:acme"


@pytest.mark.django_db
def test_the_claims_of_a_jwt_scope_by_subject_so_a_refreshed_token_still_gets_its_replay(client):
    """An agent's try times out, its access token expires, it refreshes and tries the same key
    again: the new token's claims name the same subject, so it is the same caller and gets the
    first try's answer, not a second order. Hashing the token instead made it another caller."""
    first = send(client, "/api/orders-claims", Authorization="Bearer claims.agent-7.1")
    refreshed = send(client, "/api/orders-claims", Authorization="Bearer claims.agent-7.2")
    assert first.status_code == refreshed.status_code == 201
    assert refreshed["Idempotent-Replayed"] == "true" and refreshed.content == first.content
    assert first.json()["caller"] == "token 1" and rows("k-1") == 1
    other = send(client, "/api/orders-claims", Authorization="Bearer claims.agent-8.1")
    assert "Idempotent-Replayed" not in other and rows("k-1") == 2
    assert sorted(Receipt.objects.values_list("scope", flat=True)) == [
        "subject:https://idp.example agent-7", "subject:https://idp.example agent-8"]


@pytest.mark.django_db
def test_an_operation_without_auth_uses_the_default_scope(client):
    assert send(client, "/api/router/raw").status_code == 201
    assert Receipt.objects.get().scope == "anonymous"


def test_an_auth_object_with_no_scope_and_no_credentials_is_refused_not_shared(rf):
    request = rf.post("/")
    request.auth = object()
    with pytest.raises(ImproperlyConfigured, match="idempotency_scope"):
        ninja.auth_scope(request)


# --- wrong placement fails loudly at import -----------------------------------------------

def make_api() -> NinjaAPI:
    return NinjaAPI(urls_namespace=f"placement-{id(object())}")


def test_the_plain_decorator_on_a_ninja_operation_is_refused_at_import_naming_the_placement():
    api = make_api()
    with pytest.raises(ImproperlyConfigured, match=r"receipts.decorators.idempotent\('order.create'\) is on the Ninja "
                                                    r"operation .*below @api.post"):
        @api.post("/x")
        @decorators.idempotent("order.create")
        def x(request):
            return {}


@pytest.mark.parametrize("decorator", [decorators.idempotent, ninja.idempotent])
def test_either_decorator_above_the_operation_decorator_is_refused_at_import(decorator):
    api = make_api()
    with pytest.raises(ImproperlyConfigured, match=r"above the Ninja operation decorator.*below @api.post"):
        @decorator("order.create")
        @api.post("/x")
        def x(request):
            return {}


def test_the_plain_decorator_on_an_async_ninja_operation_is_refused_at_import():
    api = make_api()
    with pytest.raises(ImproperlyConfigured, match="below @api.post"):
        @api.post("/x")
        @decorators.idempotent("order.create")
        async def x(request):
            return {}


def test_the_plain_decorator_through_decorate_view_is_refused_at_import():
    from ninja.decorators import decorate_view

    api = make_api()
    with pytest.raises(ImproperlyConfigured, match="before Ninja authenticates"):
        @api.post("/x")
        @decorate_view(decorators.idempotent("order.create"))
        def x(request):
            return {}


@pytest.mark.django_db
def test_a_router_mounted_in_two_apis_renders_and_replays_each_apis_own_way(client):
    ours = send(client, "/api/router/raw", key="k-ours")
    theirs = send(client, "/other/router/raw", key="k-theirs")
    assert ours["Content-Type"] == "application/json; charset=utf-8"
    assert theirs["Content-Type"] == "application/vnd.orders+json; charset=utf-8"
    assert send(client, "/other/router/raw", key="k-theirs")["Content-Type"] == theirs["Content-Type"]
    assert rows("k-ours") == rows("k-theirs") == 1


@pytest.mark.django_db
def test_the_ninja_decorator_outside_ninja_fails_loudly(rf):
    @ninja.idempotent("order.create")
    def x(request):
        return {}

    with pytest.raises(ImproperlyConfigured, match="outside a Ninja operation"):
        x(rf.post("/", HTTP_IDEMPOTENCY_KEY="k"))
