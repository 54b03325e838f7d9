from __future__ import annotations

import collections
import hashlib
import json
import threading
from datetime import timedelta

import httpx
import pytest
from django.utils.http import http_date
import time_machine
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from receipts import keys, store, waiting
from idemdash.core.clients import create_token
from receipts.decorators import idempotent
from receipts.keys import session_reference
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt
from tests.receipts import urls as test_urls
from tests.waits import until

pytestmark = pytest.mark.urls("tests.receipts.urls")


def post(client: Client, path: str, body: object = None, key: str | None = "k-1", **headers: str):
    if key is not None:
        headers["Idempotency-Key"] = key
    return client.post(path, json.dumps(body if body is not None else {"amount": 100}), content_type="application/json", headers=headers)


def rows(key: str) -> int:
    return AuditEntry.objects.filter(action="test.side_effect", object_id=key).count()


def problem_type(response) -> str:
    assert response["Content-Type"] == "application/problem+json"
    return response.json()["type"].rsplit(":", 1)[1]


@pytest.fixture(autouse=True)
def _no_hooks():
    test_urls.hooks.clear()
    yield
    test_urls.hooks.clear()


# --- first attempts and replays ---------------------------------------------------------

@pytest.mark.django_db
def test_a_first_post_runs_the_view_and_stores_its_response(client):
    response = post(client, "/capture")
    assert response.status_code == 201
    assert "Idempotent-Replayed" not in response
    receipt = Receipt.objects.get(key="k-1")
    assert receipt.status == "completed" and receipt.scope == "anonymous"
    assert receipt.operation == "payment.capture"
    assert receipt.response_status == 201
    assert receipt.response_content_type == "application/json"
    assert json.loads(receipt.response_body) == response.json()
    assert receipt.request == {"method": "POST", "path": "/capture", "content_type": "application/json", "body": {"amount": 100}}


@pytest.mark.django_db
def test_a_repeat_replays_the_stored_response_without_running_the_view(client):
    first = post(client, "/capture")
    again = post(client, "/capture", body={"amount": 100})
    assert again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
    assert again["Content-Type"] == "application/json"
    assert again.content == first.content
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_every_answer_for_a_key_says_when_its_receipt_expires(client):
    first = post(client, "/capture")
    expires = http_date(Receipt.objects.get(key="k-1").expires_at.timestamp())
    assert first["Idempotency-Key-Expires"] == expires
    assert post(client, "/capture")["Idempotency-Key-Expires"] == expires  # the replay
    assert post(client, "/capture", body={"amount": 5})["Idempotency-Key-Expires"] == expires  # the 422


@pytest.mark.django_db
def test_a_permanent_receipts_key_never_expires_and_no_answer_says_it_does(client, settings):
    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"ttl_seconds": None}}
    assert "Idempotency-Key-Expires" not in post(client, "/capture")
    assert "Idempotency-Key-Expires" not in post(client, "/capture")


@pytest.mark.django_db
def test_a_repeat_with_the_same_json_in_another_key_order_is_replayed(client):
    post(client, "/capture", body={"a": 1, "b": 2})
    again = post(client, "/capture", body={"b": 2, "a": 1})
    assert again["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_a_completed_receipt_without_a_status_replays_as_200(client):
    first = post(client, "/capture")
    Receipt.objects.update(response_status=None)  # as completed by a caller that stores no status
    again = post(client, "/capture")
    assert again.status_code == 200 and again.content == first.content


@pytest.mark.django_db
def test_a_quoted_structured_field_key_is_the_same_key_as_the_bare_one(client):
    post(client, "/capture", key='"order-7"')
    again = post(client, "/capture", key="order-7")
    assert again["Idempotent-Replayed"] == "true"
    assert Receipt.objects.get().key == "order-7"


@pytest.mark.django_db
def test_reusing_a_key_with_another_body_is_422(client):
    post(client, "/capture", body={"amount": 100})
    response = post(client, "/capture", body={"amount": 999})
    assert response.status_code == 422
    assert problem_type(response) == "idempotency-key-reused"
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_reusing_a_key_on_another_path_is_422(client):
    post(client, "/capture")
    assert post(client, "/capture?status=200").status_code == 422


# --- the header ---------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_missing_key_is_400_where_required(client):
    response = post(client, "/capture", key=None)
    assert response.status_code == 400
    assert problem_type(response) == "idempotency-key-missing"
    assert rows("") == 0 and not Receipt.objects.exists()


@pytest.mark.django_db
def test_a_missing_key_just_runs_the_view_where_optional(client):
    assert post(client, "/optional", key=None).status_code == 201
    assert post(client, "/optional", key=None).status_code == 201
    assert rows("none") == 2
    assert not Receipt.objects.exists()


@pytest.mark.django_db
def test_a_present_key_is_honoured_where_optional(client):
    post(client, "/optional", key="opt")
    assert post(client, "/optional", key="opt")["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", '""', "x" * 256, "caf\u00e9", "a\x7fb"])
def test_a_malformed_key_is_400(client, key):
    response = post(client, "/capture", key=key)
    assert response.status_code == 400
    assert problem_type(response) == "idempotency-key-invalid"
    assert not Receipt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "head", "options"])
def test_safe_methods_pass_through_untouched(client, method):
    response = getattr(client, method)("/echo", headers={"Idempotency-Key": "safe"})
    assert response.status_code == 200
    assert "Idempotent-Replayed" not in response
    assert not Receipt.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_other_unsafe_methods_are_covered(client, method):
    send = getattr(client, method)
    send("/echo", "{}", content_type="application/json", headers={"Idempotency-Key": "u"})
    again = send("/echo", "{}", content_type="application/json", headers={"Idempotency-Key": "u"})
    assert again["Idempotent-Replayed"] == "true"
    assert rows("u") == 1


# --- responses that are not stored, and failures ---------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("status", [401, 403, 408, 429])
def test_responses_that_depend_on_the_caller_or_the_moment_are_not_stored(client, status):
    first = post(client, f"/capture?status={status}")
    assert first.status_code == status
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.response_status is None
    again = post(client, f"/capture?status={status}")
    assert "Idempotent-Replayed" not in again
    assert rows("k-1") == 2  # the view's own writes commit; the key just is not spent
    assert Attempt.objects.filter(outcome="released").count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("status", [400, 404, 409, 422])
def test_deterministic_client_errors_are_stored_and_replayed(client, status):
    post(client, f"/capture?status={status}")
    again = post(client, f"/capture?status={status}")
    assert again.status_code == status and again["Idempotent-Replayed"] == "true"
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_a_5xx_rolls_back_the_views_writes_and_the_next_attempt_runs_again(client):
    first = post(client, "/capture?status=503")
    assert first.status_code == 503
    assert rows("k-1") == 0
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable
    assert receipt.response_status == 503 and receipt.error == "HTTP 503"
    again = post(client, "/capture?status=503")
    assert "Idempotent-Replayed" not in again
    assert Receipt.objects.get().attempts == 2
    assert list(Attempt.objects.order_by("id").values_list("outcome", flat=True)) == [
        "claimed",
        "failed",
        "retried_after_failure",
        "failed",
    ]


@pytest.mark.django_db
def test_an_exception_rolls_back_marks_the_receipt_failed_and_is_reraised(client):
    with pytest.raises(RuntimeError, match="ledger unreachable"):
        post(client, "/explode")
    assert rows("k-1") == 0
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable
    assert receipt.error == "RuntimeError: ledger unreachable"
    assert receipt.response_status == 500
    assert json.loads(receipt.response_body)["type"] == "urn:idemdash:problem:internal-error"
    with pytest.raises(RuntimeError):
        post(client, "/explode")  # retried, not replayed
    assert Receipt.objects.get().attempts == 2


@pytest.mark.django_db
def test_an_http404_raised_by_the_view_is_not_a_failure_and_is_not_stored(client, settings):
    settings.RECEIPTS_OPERATIONS = {"email.*": {"on_failure": "burn"}}
    assert post(client, "/missing").status_code == 404
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.error == "Http404: not stored"
    assert rows("k-1") == 0
    assert post(client, "/missing").status_code == 404
    assert Receipt.objects.get().attempts == 2


@pytest.mark.django_db
def test_a_burning_operation_replays_its_exception_as_a_500_problem(client, settings):
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}
    with pytest.raises(RuntimeError):
        post(client, "/explode")
    again = post(client, "/explode")
    assert again.status_code == 500
    assert again["Idempotent-Replayed"] == "true"
    assert problem_type(again) == "internal-error"
    assert Receipt.objects.get().attempts == 1


@pytest.mark.django_db
def test_a_burning_operation_replays_its_stored_5xx(client, settings):
    settings.RECEIPTS_OPERATIONS = {"payment.*": {"on_failure": "burn"}}
    first = post(client, "/capture?status=502")
    again = post(client, "/capture?status=502")
    assert again.status_code == 502 and again["Idempotent-Replayed"] == "true"
    assert again.content == first.content
    assert rows("k-1") == 0


@pytest.mark.django_db
def test_a_burned_failure_without_a_stored_response_replays_a_500_problem(client, settings):
    settings.RECEIPTS_OPERATIONS = {"payment.*": {"on_failure": "burn"}}
    # A receipt failed by something other than the decorator (e.g. the JSON API).
    fingerprint_owner = post(client, "/capture?status=503")
    assert fingerprint_owner.status_code == 503
    Receipt.objects.update(response_status=None, response_body="")
    again = post(client, "/capture?status=503")
    assert again.status_code == 500 and again["Idempotent-Replayed"] == "true"
    assert problem_type(again) == "previous-failure"


# --- in progress, lease lost ---------------------------------------------------------------

@pytest.mark.django_db
def test_a_second_request_while_the_first_runs_is_409_with_retry_after(client):
    seen = {}

    def second_request() -> None:
        seen["response"] = post(client, "/capture")

    test_urls.hooks["hook"] = second_request
    first = post(client, "/capture")
    assert first.status_code == 201
    busy = seen["response"]
    assert busy.status_code == 409
    assert problem_type(busy) == "request-in-progress"
    assert 1 <= int(busy["Retry-After"]) <= 10
    assert busy.json()["retry_after"] == int(busy["Retry-After"])
    assert rows("k-1") == 1


# A takeover on the view's own connection: tests/receipts/test_view_contract.py, for every kind of view.


# --- receipts.current() while the view runs --------------------------------------------------

@pytest.mark.django_db
def test_the_view_runs_under_its_claim_with_the_downstream_key_and_nothing_is_current_after(client):
    import receipts
    from receipts.downstream import downstream_key

    seen = []
    test_urls.hooks["hook"] = lambda: seen.append(receipts.current())
    assert post(client, "/capture").status_code == 201
    assert receipts.current() is None
    [claim] = seen
    receipt = Receipt.objects.get()
    assert (claim.key, claim.scope, claim.operation, claim.attempt) == ("k-1", "anonymous", "payment.capture", 1)
    assert claim.fencing_token == receipt.fencing_token
    assert claim.downstream_key == downstream_key("anonymous", "k-1", receipt.created_at)


@pytest.mark.django_db(transaction=True)
def test_an_async_view_runs_under_its_claim_too():
    import receipts
    from asgiref.sync import async_to_sync
    from django.http import JsonResponse
    from django.test import RequestFactory

    @idempotent("email.send")
    async def send(request):
        claim = receipts.current()
        return JsonResponse({"key": claim.key, "downstream_key": claim.downstream_key}, status=201)

    request = RequestFactory().post("/send", "{}", content_type="application/json", headers={"Idempotency-Key": "a-1"})
    response = async_to_sync(send)(request)
    assert response.status_code == 201
    assert json.loads(response.content)["key"] == "a-1"
    assert json.loads(response.content)["downstream_key"].startswith("idemdash-")
    assert receipts.current() is None


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_takeover_on_another_connection_wins_and_the_slow_views_writes_roll_back():
    client = Client()
    with time_machine.travel(timezone.now(), tick=False) as traveller:

        def takeover_from_another_connection() -> None:
            traveller.shift(timedelta(seconds=31))
            receipt = Receipt.objects.get(key="k-1")
            result = {}

            def other_worker() -> None:
                try:
                    result["claim"] = store.claim(
                        "anonymous", "k-1", "payment.capture", fingerprint=receipt.fingerprint
                    )
                    store.complete(store.Held("anonymous", "k-1", result["claim"].token), response_status=200, body="other")
                finally:
                    connections.close_all()

            worker = threading.Thread(target=other_worker)
            worker.start()
            worker.join()
            assert result["claim"].outcome == "lease_takeover"

        test_urls.hooks["hook"] = takeover_from_another_connection
        response = post(client, "/capture")
    assert response.status_code == 409 and problem_type(response) == "lease-lost"
    assert rows("k-1") == 0
    receipt = Receipt.objects.get()
    assert receipt.status == "completed" and receipt.response_body == "other"
    lost = Attempt.objects.get(outcome="stale_token")
    assert lost.fencing_token == 1 and "rolled back" in lost.detail
    assert post(client, "/capture")["Idempotent-Replayed"] == "true"


# --- bodies that need care -------------------------------------------------------------------

@pytest.mark.django_db
def test_a_streaming_response_is_passed_through_and_not_stored(client):
    first = post(client, "/stream")
    assert b"".join(first.streaming_content) == b"ab"
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.retryable and receipt.error == "streaming response"
    second = post(client, "/stream")
    assert "Idempotent-Replayed" not in second
    assert rows("k-1") == 2


@pytest.mark.django_db
def test_a_binary_body_is_stored_and_replayed_byte_for_byte(client):
    first = post(client, "/binary")
    again = post(client, "/binary")
    assert again["Idempotent-Replayed"] == "true"
    assert again.content == first.content == bytes([0, 255, 254, 1])
    assert again["Content-Type"] == "application/octet-stream"
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_a_redirect_is_replayed_with_its_location(client):
    first = post(client, "/redirect")
    again = post(client, "/redirect")
    assert again.status_code == 303 and again["Idempotent-Replayed"] == "true"
    assert again["Location"] == first["Location"]


REPLAYED = ["ETag", "X-Row", "Cache-Control", "Link"]
NEVER_REPLAYED = ["Date", "Connection", "X-Hop", "Keep-Alive", "Transfer-Encoding", "Set-Cookie"]


@pytest.mark.django_db
def test_a_replay_carries_the_views_headers_but_hop_by_hop_set_cookie_and_date(client):
    first = post(client, "/headers", **{"X-Request-Id": "r-1"})
    again = post(client, "/headers", **{"X-Request-Id": "r-2"})
    assert again["Idempotent-Replayed"] == "true" and again.status_code == 201
    assert [(name, again[name]) for name in REPLAYED] == [(name, first[name]) for name in REPLAYED]
    assert again["X-Request-Id"] == "r-1"  # the first attempt's, as stored
    assert not [name for name in NEVER_REPLAYED if again.has_header(name)]
    assert not again.cookies and first.cookies["session-ish"].value == "first-caller"
    assert again.content == first.content
    stored = list(json.loads(Receipt.objects.get().response_body.split(":", 3)[3])["headers"])
    assert stored == ["ETag", "X-Row", "Cache-Control", "Link", "X-Request-Id"]  # the view's order
    assert rows("k-1") == 1


@pytest.mark.django_db
def test_headers_listed_in_replay_excluded_headers_are_not_stored(client, settings):
    settings.RECEIPTS_REPLAY_EXCLUDED_HEADERS = ["x-request-id", "Cache-Control"]
    post(client, "/headers", **{"X-Request-Id": "r-1"})
    again = post(client, "/headers", **{"X-Request-Id": "r-2"})
    assert again["Idempotent-Replayed"] == "true" and again["ETag"]
    assert not again.has_header("X-Request-Id") and not again.has_header("Cache-Control")


@pytest.mark.django_db
def test_a_plain_json_response_is_stored_as_its_text(client):
    post(client, "/capture")
    assert json.loads(Receipt.objects.get().response_body)  # no envelope: nothing but Content-Type


@pytest.mark.django_db
def test_a_receipt_stored_with_the_three_headers_of_old_still_replays(client):
    post(client, "/redirect")
    old = 'idemdash:envelope:v1:{"headers":{"Location":"/done/7"},"body":""}'
    Receipt.objects.update(response_body=old)
    again = post(client, "/redirect")
    assert again.status_code == 303 and again["Location"] == "/done/7"
    assert again["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_a_body_over_the_upload_limit_is_413(client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10
    response = post(client, "/capture", body={"text": "x" * 100})
    assert response.status_code == 413 and problem_type(response) == "payload-too-large"
    assert not Receipt.objects.exists()


@pytest.mark.django_db
def test_a_body_nested_too_deep_for_json_is_handled_as_raw_text(client):
    body = "[" * 100_000
    deep = client.post("/capture", body, content_type="application/json", headers={"Idempotency-Key": "deep2"})
    assert deep.status_code == 201
    assert Receipt.objects.get(key="deep2").request["body"] == body[:4096]


@pytest.mark.django_db
def test_a_request_with_nul_characters_is_stored_without_them(client):
    post(client, "/capture", body={"note": "a\x00b"})
    assert Receipt.objects.get().request["body"] == {"note": "a\ufffdb"}


# --- scopes and CSRF ----------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_logged_in_user_is_the_scope_and_the_session_is_recorded_by_a_keyed_reference():
    user = User.objects.create_user("ada", password="pw-123456")
    client = Client()
    client.force_login(user)
    response = post(client, "/session")
    assert response.status_code == 201
    receipt = Receipt.objects.get()
    assert receipt.scope == f"user:{user.pk}"
    assert receipt.user_id == str(user.pk)
    session_key = client.session.session_key
    # Whoever reads the receipt (the admin, the receipt page) must not be able to use the session.
    assert session_key not in receipt.session_id
    assert receipt.session_id == session_reference(session_key)
    assert receipt.session_id.startswith("session:")

    other = Client()
    other.force_login(user)
    post(other, "/session", key="k2")
    assert Receipt.objects.get(key="k2").session_id not in ("", receipt.session_id)  # sessions told apart


@pytest.mark.django_db
def test_the_decorator_does_not_exempt_a_session_view_from_csrf():
    user = User.objects.create_user("ada", password="pw-123456")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    response = post(client, "/session")
    assert response.status_code == 403
    assert not Receipt.objects.exists() and rows("k-1") == 0


def test_csrf_exemption_survives_the_decorator_in_either_order():
    def view(request):
        return None

    assert idempotent("email.send")(csrf_exempt(view)).csrf_exempt is True
    assert csrf_exempt(idempotent("email.send")(view)).csrf_exempt is True
    assert not getattr(idempotent("email.send")(view), "csrf_exempt", False)


@pytest.mark.django_db
def test_a_session_view_with_its_csrf_token_is_served():
    user = User.objects.create_user("ada", password="pw-123456")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    secret = "abcdefghijklmnopqrstuvwxyzABCDEF"  # a CSRF secret is 32 letters and digits
    client.cookies["csrftoken"] = secret
    response = post(client, "/session", **{"X-CSRFToken": secret})
    assert response.status_code == 201


@pytest.mark.django_db
def test_a_bearer_token_client_is_the_scope(client):
    api_client, token = create_token("billing")
    post(client, "/capture", Authorization=f"Bearer {token}")
    assert Receipt.objects.get().scope == "client:billing" == api_client.scope


# A view whose caller Django does not know (an auth framework that authenticates inside the
# view): the credentials the request carries keep callers apart, never `anonymous`.

def credentialed(client: Client, credential: str, kind: str):
    if kind == "session cookie":
        client.cookies[settings.SESSION_COOKIE_NAME] = credential
        return post(client, "/capture")
    return post(client, "/capture", Authorization=credential)


CREDENTIALS = {
    "authorization header": ("Bearer eyJhbGciOi.alice-secret", "Bearer eyJhbGciOi.bob-secret"),
    "session cookie": ("alicesessionsecret0000000000000a", "bobsessionsecret00000000000000b"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", CREDENTIALS)
def test_two_credentials_with_the_same_key_get_two_receipts_and_two_executions(kind):
    alice, bob = CREDENTIALS[kind]
    first = credentialed(Client(), alice, kind)
    other = credentialed(Client(), bob, kind)
    assert first.status_code == other.status_code == 201
    assert "Idempotent-Replayed" not in other and other.content != first.content
    again = credentialed(Client(), alice, kind)
    assert again["Idempotent-Replayed"] == "true" and again.content == first.content
    assert rows("k-1") == 2
    scopes = sorted(Receipt.objects.values_list("scope", flat=True))
    assert len(set(scopes)) == 2 and "anonymous" not in scopes
    assert all(scope.startswith("credential:") and len(scope) == len("credential:") + 64 for scope in scopes)


@pytest.mark.django_db
@pytest.mark.parametrize("kind", CREDENTIALS)
def test_a_credential_scope_holds_no_credential_in_clear_and_is_keyed_by_the_secret_key(kind, settings):
    alice, _ = CREDENTIALS[kind]
    credentialed(Client(), alice, kind)
    receipt = Receipt.objects.get()
    stored = json.dumps([receipt.scope, receipt.request, receipt.response_body])
    assert "secret" not in stored
    # Not a plain hash a database reader could recompute from a guessed token.
    assert receipt.scope.removeprefix("credential:") not in {
        hashlib.sha256(value.encode()).hexdigest() for value in (alice, json.dumps([alice, ""]), json.dumps(["", alice]))
    }
    settings.SECRET_KEY = "another-secret-key-for-this-test-only-0123456789abcdef"
    credentialed(Client(), alice, kind)
    assert Receipt.objects.count() == 2  # rotating SECRET_KEY starts these keys anew


@pytest.mark.parametrize(("claims", "scope"), [
    ({"sub": "u-1"}, "subject:u-1"),
    ({"sub": 42, "iss": "https://idp.example"}, "subject:https://idp.example 42"),
    ({"sub": "u-1", "iss": "i" * 300}, "subject:sha256:"),
])
def test_the_claims_of_a_jwt_are_scoped_by_subject_and_issuer_within_the_columns_length(claims, scope):
    assert keys.subject_scope(claims).startswith(scope) and len(keys.subject_scope(claims)) <= 255


@pytest.mark.parametrize("claims", [{}, {"sub": ""}, {"sub": None}, {"sub": True}, {"sub": ["u-1"]}])
def test_claims_without_a_usable_subject_fall_back_to_the_hashed_credentials(rf, claims):
    assert keys.subject_scope(claims) is None
    request = rf.post("/", HTTP_AUTHORIZATION="Bearer opaque")
    request.auth = claims
    assert keys.default_scope(request).startswith("credential:")


def test_claims_an_auth_framework_left_without_a_user_are_scoped_by_their_subject(rf):
    """DRF's request.auth, when its authentication returns claims with an anonymous user."""
    from django.contrib.auth.models import AnonymousUser

    request = rf.post("/", HTTP_AUTHORIZATION="Bearer first-token")
    request.user, request.auth = AnonymousUser(), {"sub": "agent-7", "iss": "https://idp.example"}
    assert keys.default_scope(request) == "subject:https://idp.example agent-7"


@pytest.mark.django_db
def test_a_request_without_credentials_is_still_anonymous(client):
    post(client, "/capture")
    assert Receipt.objects.get().scope == "anonymous"


@pytest.mark.django_db
def test_the_same_key_in_two_scopes_runs_twice(client):
    post(client, "/tenant", **{"X-Tenant": "a"})
    second = post(client, "/tenant", **{"X-Tenant": "b"})
    assert "Idempotent-Replayed" not in second
    assert sorted(Receipt.objects.values_list("scope", flat=True)) == ["tenant:a", "tenant:b"]
    assert rows("k-1") == 2


# --- Prefer: wait -----------------------------------------------------------------------------

@pytest.mark.django_db
def test_prefer_wait_is_capped_by_max_wait_and_reported(client, settings):
    settings.RECEIPTS_MAX_WAIT_SECONDS = 7
    response = post(client, "/capture", Prefer="wait=100")
    assert response.status_code == 201
    assert response["Preference-Applied"] == "wait=7"


@pytest.mark.django_db
def test_prefer_wait_past_the_cap_on_waiters_is_a_409_at_once_without_preference_applied(client, settings):
    settings.RECEIPTS_MAX_WAITERS = 0
    seen = {}

    def second_request() -> None:
        seen["response"] = post(client, "/capture", Prefer="wait=10")

    test_urls.hooks["hook"] = second_request
    assert post(client, "/capture").status_code == 201
    busy = seen["response"]
    assert busy.status_code == 409 and problem_type(busy) == "request-in-progress" and busy["Retry-After"]
    # Not the 10 s it asked to wait: refused a waiting slot, it did not wait at all.
    assert Attempt.objects.get(key="k-1", outcome="in_progress").waited_ms is None
    assert "Preference-Applied" not in busy


@pytest.mark.django_db
@pytest.mark.parametrize("prefer", ["wait=soon", "wait=-1", "respond-async", "wait=0"])
def test_an_unusable_prefer_wait_is_ignored(client, prefer):
    response = post(client, "/capture", Prefer=prefer)
    assert response.status_code == 201 and "Preference-Applied" not in response


@pytest.mark.django_db(transaction=True)
def test_prefer_wait_waits_for_the_first_attempt_and_replays_it(live_server):
    url = live_server.url + "/capture"
    headers = {"Idempotency-Key": "slow", "Content-Type": "application/json"}
    running, finish = threading.Event(), threading.Event()

    def first_attempt_runs_until_told() -> None:
        running.set()
        assert finish.wait(30), "the waiter never waited"

    test_urls.hooks["hook"] = first_attempt_runs_until_told
    answers: dict = {}

    def send(name: str, **extra: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update(
            {name: httpx.post(url, content=b"{}", headers={**headers, **extra}, timeout=30)}))
        thread.start()
        return thread

    first = send("first")
    assert running.wait(30), "the first attempt never ran"
    # Still running: without the wait preference this would be a 409.
    assert Receipt.objects.get(key="slow").status == "processing"
    test_urls.hooks.clear()
    duplicate = send("waited", Prefer="wait=10")
    # Inside its claim: waiting for the first attempt (on SQLite, queued behind its write lock).
    until(lambda: _inside_claims("slow") == 1, "the duplicate waits for the first attempt")
    finish.set()
    first.join(30)
    duplicate.join(30)
    first, waited = answers["first"], answers["waited"]
    assert first.status_code == 201
    assert waited.status_code == 201
    assert waited.headers["Idempotent-Replayed"] == "true"
    assert waited.headers["Preference-Applied"] == "wait=10"
    assert waited.content == first.content
    assert rows("slow") == 1


# --- real concurrency over HTTP ---------------------------------------------------------------

@pytest.fixture
def claims_in_flight(monkeypatch):
    """Per key, how many claims of this process have begun and not yet answered (on SQLite a
    claim queued behind the running view's write lock is one)."""
    inside: collections.Counter = collections.Counter()
    lock = threading.Lock()
    claim = store.claim

    def counted(scope, key, *args, **kwargs):
        with lock:
            inside[key] += 1
        try:
            return claim(scope, key, *args, **kwargs)
        finally:
            with lock:
                inside[key] -= 1

    monkeypatch.setattr(store, "claim", counted)
    return inside


@pytest.mark.django_db(transaction=True)
def test_twenty_simultaneous_callers_per_key_run_the_view_once(live_server, claims_in_flight):
    callers = 20
    # Each caller its own client, so its own connection; the live server serves each on its own
    # thread and database connection. Made once for the ten keys (a client costs tens of ms).
    clients = [httpx.Client(timeout=60) for _ in range(callers)]
    for n in range(10):
        key = f"race-{n}"
        barrier = threading.Barrier(callers)
        results: list[httpx.Response] = []
        lock = threading.Lock()
        # The view that runs holds its claim until every other caller has met it: answered (a
        # 409), or inside its claim (on SQLite, queued behind the view's write lock).
        test_urls.hooks["hook"] = lambda: until(
            lambda: len(results) + claims_in_flight[key] == callers - 1, "every other caller meets the running view")

        def call(http: httpx.Client) -> None:
            barrier.wait()
            reply = http.post(
                live_server.url + "/capture",
                content=b'{"amount": 5}',
                headers={"Idempotency-Key": key, "Content-Type": "application/json"},
            )
            with lock:
                results.append(reply)

        threads = [threading.Thread(target=call, args=(http,)) for http in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert rows(key) == 1, key
        statuses = sorted(r.status_code for r in results)
        assert set(statuses) <= {201, 409}, statuses
        ran = [r for r in results if r.status_code == 201 and "Idempotent-Replayed" not in r.headers]
        assert len(ran) == 1
        replayed = [r for r in results if r.headers.get("Idempotent-Replayed") == "true"]
        assert all(r.content == ran[0].content for r in replayed)
        assert len(ran) + len(replayed) + statuses.count(409) == callers
    for http in clients:
        http.close()
    assert Receipt.objects.filter(status="completed").count() == 10


def _inside_claims(key: str) -> int:
    """How many claims of this process that may wait are looking at the key now (each is
    subscribed to its wake-ups from its first look to its answer: receipts/waiting.py)."""
    return len(waiting._waiters.get(waiting.topic("anonymous", key), ()))


def test_a_malformed_operation_is_refused_when_the_view_is_decorated():
    with pytest.raises(keys.InvalidOperation):
        idempotent("has spaces")
