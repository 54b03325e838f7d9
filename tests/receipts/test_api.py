from __future__ import annotations

import json
from datetime import timedelta

import pytest
import time_machine
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from django.test import Client
from django.utils import timezone

from idemdash.core.clients import create_token
from idemdash.core.models import ApiClient
from receipts.models import Attempt, Receipt, ReceiptReference

pytestmark = pytest.mark.django_db

BASE = "/api/v1/receipts/"


@pytest.fixture
def token() -> str:
    return create_token("worker")[1]


@pytest.fixture
def api(client: Client, token: str):
    def call(endpoint: str, body: object, *, content_type: str = "application/json", auth: str | None = None, **headers: str):
        raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return client.post(
            BASE + endpoint,
            raw,
            content_type=content_type,
            headers={"Authorization": auth if auth is not None else f"Bearer {token}", **headers},
        )

    return call


def kind(response) -> str:
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["title"] and body["status"] == response.status_code
    return body["type"].rsplit(":", 1)[1]


def claim_body(**overrides: object) -> dict:
    return {"key": "job-1", "operation": "email.send", "request": {"to": "a@example.com"}, **overrides}


# --- claim -----------------------------------------------------------------------------------

def test_a_claim_is_201_with_the_fencing_token_and_lease(api):
    response = api("claim", claim_body())
    assert response.status_code == 201
    data = response.json()
    assert data["outcome"] == "claimed" and data["key"] == "job-1"
    assert data["token"] == 1 and data["attempts"] == 1
    assert data["lease_expires_at"] == Receipt.objects.get().lease_expires_at.isoformat()
    assert Receipt.objects.get().scope == "client:worker"


def test_a_claim_after_a_failure_is_201_and_says_so(api):
    token = api("claim", claim_body()).json()["token"]
    api("fail", {"key": "job-1", "token": token, "error": "smtp down"})
    again = api("claim", claim_body())
    assert again.status_code == 201
    assert again.json()["outcome"] == "retried_after_failure"
    assert again.json()["token"] == token + 1


def test_a_claim_after_the_lease_ran_out_is_a_201_takeover(api, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        api("claim", claim_body(lease_seconds=5))
        traveller.shift(timedelta(seconds=6))
        again = api("claim", claim_body())
    assert again.status_code == 201 and again.json()["outcome"] == "lease_takeover"


def test_every_attempt_of_a_claim_is_handed_the_same_downstream_key_and_a_new_life_a_new_one(api, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = api("claim", claim_body(lease_seconds=5)).json()
        traveller.shift(timedelta(seconds=6))
        takeover = api("claim", claim_body()).json()
        api("fail", {"key": "job-1", "token": takeover["token"], "error": "timeout"})
        retry = api("claim", claim_body()).json()
        api("complete", {"key": "job-1", "token": retry["token"], "response": None})
        traveller.shift(timedelta(days=2))  # past the receipt's TTL: the key starts a new life
        reborn = api("claim", claim_body()).json()
    assert [first["outcome"], takeover["outcome"], retry["outcome"], reborn["outcome"]] == [
        "claimed", "lease_takeover", "retried_after_failure", "claimed"]
    assert first["scope"] == "client:worker"
    assert first["downstream_key"] == takeover["downstream_key"] == retry["downstream_key"]
    assert reborn["downstream_key"] != first["downstream_key"]
    assert first["downstream_key"].startswith("idemdash-") and len(first["downstream_key"]) == 41


def test_a_completed_key_replays_its_response_with_the_replayed_header(api):
    token = api("claim", claim_body()).json()["token"]
    api("complete", {"key": "job-1", "token": token, "response": {"message_id": "m-1", "n": [1, 2]}})
    again = api("claim", claim_body(request={"to": "a@example.com"}))
    assert again.status_code == 200
    assert again["Idempotent-Replayed"] == "true"
    assert again.json() == {
        "outcome": "replayed",
        "key": "job-1",
        "status": "completed",
        "response": {"message_id": "m-1", "n": [1, 2]},
    }


def test_a_burned_failure_replays_with_its_error(api, settings):
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}
    token = api("claim", claim_body(operation="ledger.post")).json()["token"]
    api("fail", {"key": "job-1", "token": token, "error": "rejected"})
    again = api("claim", claim_body(operation="ledger.post"))
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json() == {"outcome": "replayed", "key": "job-1", "status": "failed", "response": None, "error": "rejected"}


def test_a_claim_on_a_held_key_is_409_with_retry_after(api):
    api("claim", claim_body())
    busy = api("claim", claim_body())
    assert busy.status_code == 409 and kind(busy) == "request-in-progress"
    assert 1 <= int(busy["Retry-After"]) <= 10


def test_a_claim_with_another_request_is_422(api):
    api("claim", claim_body())
    assert kind(api("claim", claim_body(request={"to": "b@example.com"}))) == "idempotency-key-reused"
    assert api("claim", claim_body(request={"to": "b@example.com"})).status_code == 422


def test_the_request_may_be_any_json_or_absent(api):
    assert api("claim", claim_body(key="a", request=[1, "two", None])).status_code == 201
    assert api("claim", {"key": "b", "operation": "email.send"}).status_code == 201
    assert Receipt.objects.get(key="b").request is None


def test_the_same_key_under_two_clients_is_two_receipts(api):
    other = create_token("other")[1]
    api("claim", claim_body())
    assert api("claim", claim_body(), auth=f"Bearer {other}").status_code == 201
    assert Receipt.objects.count() == 2


@pytest.mark.parametrize(
    "body, field",
    [
        ({"operation": "email.send"}, "key"),
        ({"key": "k"}, "operation"),
        (claim_body(key=""), "key"),
        (claim_body(key="x" * 256), "key"),
        (claim_body(key="caf\u00e9"), "key"),
        (claim_body(key=7), "key"),
        (claim_body(operation="has space"), "operation"),
        (claim_body(operation=None), "operation"),
        (claim_body(lease_seconds=0), "lease_seconds"),
        (claim_body(lease_seconds=14), "lease_seconds"),  # below RECEIPTS_MIN_LEASE_SECONDS
        (claim_body(lease_seconds=3601), "lease_seconds"),
        (claim_body(lease_seconds=True), "lease_seconds"),
        (claim_body(lease_seconds=2.5), "lease_seconds"),
        (claim_body(lease_seconds="30"), "lease_seconds"),
        (claim_body(wait_seconds=-1), "wait_seconds"),
        (claim_body(wait_seconds=31), "wait_seconds"),
        (claim_body(wait_seconds=False), "wait_seconds"),
        (claim_body(request={"note": "a\x00b"}), "request"),
        (claim_body(surprise=1), "surprise"),
        (claim_body(request=json.loads("[" * 70 + "]" * 70)), "body"),
    ],
)
def test_a_bad_claim_field_is_400_and_writes_nothing(api, body, field):
    response = api("claim", body)
    assert response.status_code == 400
    assert kind(response) == "invalid-field"
    assert response.json()["field"] == field
    assert not Receipt.objects.exists() and not Attempt.objects.exists()


@pytest.mark.parametrize("raw", ["{", " ", "NaN", '{"key": NaN}', "[1]", '"text"', "null", "[" * 100000])
def test_a_body_that_is_not_a_json_object_is_400(api, raw):
    response = api("claim", raw)
    assert response.status_code == 400 and kind(response) == "invalid-json"
    assert not Receipt.objects.exists()


def test_a_wait_within_the_limit_is_accepted(api):
    assert api("claim", claim_body(wait_seconds=0.5)).status_code == 201


# --- auth, methods, media types ---------------------------------------------------------------

@pytest.mark.parametrize("auth", ["", "Bearer", "Bearer wrong", "Basic abc", "Token x"])
def test_a_missing_or_wrong_token_is_401(api, auth):
    response = api("claim", claim_body(), auth=auth)
    assert response.status_code == 401 and kind(response) == "unauthorized"
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert not Receipt.objects.exists()


def test_a_revoked_token_is_401(api, token):
    ApiClient.objects.update(revoked_at=timezone.now())
    assert api("claim", claim_body()).status_code == 401


@pytest.mark.parametrize("endpoint", ["claim", "complete", "fail", "heartbeat"])
@pytest.mark.parametrize("method", ["get", "put", "patch", "delete"])
def test_other_methods_are_405(client, token, endpoint, method):
    response = getattr(client, method)(BASE + endpoint, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405 and kind(response) == "method-not-allowed"
    assert response["Allow"] == "POST"


def test_posting_to_the_receipt_lookup_is_405(client, token):
    response = client.post(BASE, "{}", content_type="application/json", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 405 and response["Allow"] == "GET"


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", ""])
def test_a_body_that_is_not_declared_json_is_415(api, content_type):
    response = api("claim", json.dumps(claim_body()), content_type=content_type)
    assert response.status_code == 415 and kind(response) == "unsupported-media-type"
    assert not Receipt.objects.exists()


def test_json_with_a_charset_or_a_json_suffix_is_accepted(api):
    assert api("claim", claim_body(key="a"), content_type="application/json; charset=utf-8").status_code == 201
    assert api("claim", claim_body(key="b"), content_type="application/vnd.idem+json").status_code == 201


def test_a_body_over_the_upload_limit_is_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 50
    response = api("claim", claim_body(request="x" * 100))
    assert response.status_code == 413 and kind(response) == "payload-too-large"


def test_the_api_needs_no_csrf_token(token):
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        BASE + "claim", json.dumps(claim_body()), content_type="application/json", headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 201


# --- complete ------------------------------------------------------------------------------------

def test_complete_stores_the_response_and_returns_the_receipt(api):
    token = api("claim", claim_body()).json()["token"]
    response = api("complete", {"key": "job-1", "token": token, "response": ["any", {"json": True}]})
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "completed" and data["response"] == ["any", {"json": True}]
    assert "fencing_token" not in data and "token" not in data


def test_complete_with_a_stale_token_is_409_and_keeps_the_winners_result(api, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        slow = api("claim", claim_body(lease_seconds=5)).json()["token"]
        traveller.shift(timedelta(seconds=6))
        fast = api("claim", claim_body()).json()["token"]
        api("complete", {"key": "job-1", "token": fast, "response": "fast"})
        late = api("complete", {"key": "job-1", "token": slow, "response": "slow"})
    assert late.status_code == 409 and kind(late) == "stale-token"
    assert api("claim", claim_body()).json()["response"] == "fast"


def test_repeating_a_completion_that_already_landed_answers_200_again(api):
    """Its first answer may have been lost with the connection: the retry must not be told
    that its result was not stored."""
    token = api("claim", claim_body()).json()["token"]
    completion = {"key": "job-1", "token": token, "response": {"id": 7}}
    assert api("complete", completion).status_code == 200
    again = api("complete", completion)
    assert again.status_code == 200 and again.json()["response"] == {"id": 7}
    other = api("complete", {**completion, "response": {"id": 8}})
    assert other.status_code == 409 and kind(other) == "stale-token"
    assert Receipt.objects.get().response_body == '{"id":7}'
    assert Attempt.objects.filter(outcome="completed").count() == 1
    # The repeat is not a stale settle (the dashboard counts those as leases lost); `other` is.
    assert Attempt.objects.filter(outcome="stale_token").count() == 1


def test_repeating_a_failure_that_already_landed_answers_200_again(api):
    token = api("claim", claim_body()).json()["token"]
    failure = {"key": "job-1", "token": token, "error": "smtp down"}
    assert api("fail", failure).status_code == 200
    assert api("fail", failure).status_code == 200
    assert api("fail", {**failure, "error": "other"}).status_code == 409
    assert Attempt.objects.filter(outcome="failed").count() == 1
    assert Attempt.objects.filter(outcome="stale_token").count() == 1


def test_complete_of_an_unknown_key_is_404_and_writes_nothing(api):
    response = api("complete", {"key": "nope", "token": 1, "response": None})
    assert response.status_code == 404 and kind(response) == "receipt-not-found"
    assert not Attempt.objects.exists()


def test_complete_of_another_clients_key_is_404(api):
    other = create_token("other")[1]
    token = api("claim", claim_body(), auth=f"Bearer {other}").json()["token"]
    assert api("complete", {"key": "job-1", "token": token, "response": 1}).status_code == 404
    assert Receipt.objects.get().status == "processing"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"key": "job-1", "token": 1}, "response"),
        ({"key": "job-1", "response": 1}, "token"),
        ({"token": 1, "response": 1}, "key"),
        ({"key": "job-1", "token": True, "response": 1}, "token"),
        ({"key": "job-1", "token": "1", "response": 1}, "token"),
        ({"key": "job-1", "token": 1.0, "response": 1}, "token"),
        ({"key": "job-1", "token": 0, "response": 1}, "token"),
        ({"key": "job-1", "token": 1, "response": "a\x00"}, "response"),
        ({"key": "job-1", "token": 1, "response": 1, "extra": 1}, "extra"),
    ],
)
def test_a_bad_complete_field_is_400_and_leaves_the_receipt_processing(api, body, field):
    api("claim", claim_body())
    response = api("complete", body)
    assert response.status_code == 400 and response.json()["field"] == field
    assert Receipt.objects.get().status == "processing"


# --- fail ------------------------------------------------------------------------------------------

def test_fail_marks_the_receipt_failed_and_retryable_by_default(api):
    token = api("claim", claim_body()).json()["token"]
    response = api("fail", {"key": "job-1", "token": token, "error": "smtp down"})
    assert response.status_code == 200
    assert response.json()["status"] == "failed" and response.json()["retryable"] is True
    assert response.json()["error"] == "smtp down"


def test_fail_can_burn_the_key(api):
    token = api("claim", claim_body()).json()["token"]
    api("fail", {"key": "job-1", "token": token, "error": "invalid address", "retryable": False})
    again = api("claim", claim_body())
    assert again.status_code == 200 and again.json()["status"] == "failed"


def test_fail_with_a_stale_token_is_409(api):
    token = api("claim", claim_body()).json()["token"]
    api("complete", {"key": "job-1", "token": token, "response": 1})
    response = api("fail", {"key": "job-1", "token": token, "error": "late"})
    assert response.status_code == 409 and kind(response) == "stale-token"
    assert Receipt.objects.get().status == "completed"


def test_fail_of_an_unknown_key_is_404(api):
    assert api("fail", {"key": "nope", "token": 1, "error": "x"}).status_code == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({"key": "job-1", "token": 1}, "error"),
        ({"key": "job-1", "token": 1, "error": ""}, "error"),
        ({"key": "job-1", "token": 1, "error": 5}, "error"),
        ({"key": "job-1", "token": 1, "error": "x", "retryable": "no"}, "retryable"),
        ({"key": "job-1", "token": 1, "error": "x", "retryable": 0}, "retryable"),
        ({"key": "job-1", "token": False, "error": "x"}, "token"),
    ],
)
def test_a_bad_fail_field_is_400(api, body, field):
    api("claim", claim_body())
    response = api("fail", body)
    assert response.status_code == 400 and response.json()["field"] == field
    assert Receipt.objects.get().status == "processing"


# --- heartbeat ------------------------------------------------------------------------------------

def test_a_heartbeat_renews_the_lease_from_now(api, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        token = api("claim", claim_body(lease_seconds=10)).json()["token"]
        traveller.shift(timedelta(seconds=8))
        response = api("heartbeat", {"key": "job-1", "token": token, "lease_seconds": 10})
        assert response.status_code == 200
        expires = timezone.now() + timedelta(seconds=10)
        assert response.json() == {"key": "job-1", "lease_expires_at": expires.isoformat()}
        assert Receipt.objects.get().lease_expires_at == expires
        traveller.shift(timedelta(seconds=8))  # 16 s after a 10 s claim: still held
        assert api("claim", claim_body()).status_code == 409


def test_a_heartbeat_without_a_length_renews_for_the_operations_lease(api, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    with time_machine.travel(timezone.now(), tick=False):
        token = api("claim", claim_body(lease_seconds=5)).json()["token"]
        response = api("heartbeat", {"key": "job-1", "token": token})
        assert response.json()["lease_expires_at"] == (timezone.now() + timedelta(seconds=30)).isoformat()


def test_a_heartbeat_after_a_takeover_is_409_stale_token_and_changes_nothing(api, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        old = api("claim", claim_body(lease_seconds=1)).json()["token"]
        traveller.shift(timedelta(seconds=2))
        assert api("claim", claim_body()).json()["outcome"] == "lease_takeover"
        lease = Receipt.objects.get().lease_expires_at
        response = api("heartbeat", {"key": "job-1", "token": old, "lease_seconds": 600})
    assert response.status_code == 409 and kind(response) == "stale-token"
    assert Receipt.objects.get().lease_expires_at == lease
    assert Attempt.objects.filter(outcome="stale_token", fencing_token=old).count() == 1


def test_a_heartbeat_after_its_own_completion_is_409_and_logs_no_lost_lease(api):
    """A heartbeat that sat in the server's queue behind its attempt's completion: the caller
    is told to stop, and the log gets no stale_token line (the dashboard's lost leases)."""
    token = api("claim", claim_body()).json()["token"]
    assert api("complete", {"key": "job-1", "token": token, "response": {"ok": True}}).status_code == 200
    response = api("heartbeat", {"key": "job-1", "token": token})
    assert response.status_code == 409 and kind(response) == "stale-token"
    assert Receipt.objects.get().status == "completed"
    assert not Attempt.objects.filter(outcome="stale_token").exists()


def test_a_heartbeat_of_an_unknown_key_is_404_and_writes_nothing(api):
    response = api("heartbeat", {"key": "nope", "token": 1})
    assert response.status_code == 404 and kind(response) == "receipt-not-found"
    assert not Attempt.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"token": 1}, "key"),
        ({"key": "job-1"}, "token"),
        ({"key": "job-1", "token": True}, "token"),
        ({"key": "job-1", "token": 1, "lease_seconds": 0}, "lease_seconds"),
        ({"key": "job-1", "token": 1, "lease_seconds": 14}, "lease_seconds"),
        ({"key": "job-1", "token": 1, "lease_seconds": 3601}, "lease_seconds"),
        ({"key": "job-1", "token": 1, "lease_seconds": 2.5}, "lease_seconds"),
        ({"key": "job-1", "token": 1, "wait_seconds": 1}, "wait_seconds"),
    ],
)
def test_a_bad_heartbeat_field_is_400_and_leaves_the_lease(api, body, field):
    api("claim", claim_body())
    lease = Receipt.objects.get().lease_expires_at
    response = api("heartbeat", body)
    assert response.status_code == 400 and response.json()["field"] == field
    assert Receipt.objects.get().lease_expires_at == lease


# --- lookup -----------------------------------------------------------------------------------------

def test_a_receipt_is_looked_up_by_key(api, client, token):
    claimed = api("claim", claim_body()).json()
    api("complete", {"key": "job-1", "token": claimed["token"], "response": {"ok": True}})
    response = client.get(BASE, {"key": "job-1"}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    data = response.json()
    receipt = Receipt.objects.get()
    assert data == {
        "key": "job-1",
        "scope": "client:worker",
        "operation": "email.send",
        "status": "completed",
        "retryable": True,
        "attempts": 1,
        "fingerprint": receipt.fingerprint,
        "request": {"to": "a@example.com"},
        "response": {"ok": True},
        "response_status": None,
        "error": "",
        "lease_expires_at": None,
        "created_at": receipt.created_at.isoformat(),
        "updated_at": receipt.updated_at.isoformat(),
        "completed_at": receipt.completed_at.isoformat(),
        "expires_at": receipt.expires_at.isoformat(),
        "permanent": False,
        "compacted_at": None,
        "policy": {
            "ttl_seconds": 86400, "lease_seconds": 30, "financial": False, "on_failure": "retry", "after_crash": "rerun",
            "compact_after_seconds": None, "fresh_key": "allow",
            "matched": {"RECEIPTS_OPERATIONS": None, "RECEIPTS_FINANCIAL_OPERATIONS": None},
        },
        "references": [],
    }


def test_a_claim_and_a_lookup_say_which_policy_the_receipt_got(api, client, token, settings):
    settings.RECEIPTS_OPERATIONS = {"payments.*": {"on_failure": "burn"}}
    claimed = api("claim", claim_body(operation="payments.capture")).json()
    receipt = Receipt.objects.get()
    assert claimed["expires_at"] == receipt.expires_at.isoformat()
    assert receipt.expires_at - receipt.created_at == timedelta(days=7)
    expected = {
        "ttl_seconds": 7 * 86400, "lease_seconds": 30, "financial": True, "on_failure": "burn", "after_crash": "rerun",
            "compact_after_seconds": None, "fresh_key": "allow",
        "matched": {"RECEIPTS_OPERATIONS": "payments.*", "RECEIPTS_FINANCIAL_OPERATIONS": "payments.*"},
    }
    assert claimed["policy"] == expected
    looked_up = client.get(BASE, {"key": "job-1"}, headers={"Authorization": f"Bearer {token}"}).json()
    assert looked_up["policy"] == expected


def test_a_permanent_operations_receipt_says_so_in_the_claim_and_the_lookup(api, client, token, settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}}
    claimed = api("claim", claim_body(operation="email.welcome"))
    assert claimed.status_code == 201
    assert claimed.json()["expires_at"] is None and claimed.json()["permanent"] is True
    assert claimed.json()["policy"]["ttl_seconds"] is None
    assert Receipt.objects.get().expires_at is None
    looked_up = client.get(BASE, {"key": "job-1"}, headers={"Authorization": f"Bearer {token}"}).json()
    assert (looked_up["expires_at"], looked_up["permanent"], looked_up["policy"]["ttl_seconds"]) == (None, True, None)


def test_another_clients_receipt_is_404(api, client):
    api("claim", claim_body())
    other = create_token("other")[1]
    response = client.get(BASE, {"key": "job-1"}, headers={"Authorization": f"Bearer {other}"})
    assert response.status_code == 404 and kind(response) == "receipt-not-found"


@pytest.mark.parametrize("params", [{}, {"key": ""}, {"key": "x" * 256}])
def test_a_lookup_without_a_valid_key_is_400(client, token, params):
    response = client.get(BASE, params, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 400 and kind(response) == "invalid-field"


def test_a_lookup_needs_a_token(client):
    assert client.get(BASE, {"key": "job-1"}).status_code == 401


def test_a_claim_whose_last_attempt_lapsed_under_hold_is_409_outcome_unknown_until_resolved(api, settings):
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = api("claim", claim_body(lease_seconds=15)).json()
        traveller.shift(timedelta(seconds=16))
        response = api("claim", claim_body())
        assert response.status_code == 409 and kind(response) == "outcome-unknown"
        assert "Retry-After" not in response
        # The lapsed attempt itself may still settle: its outcome is then known.
        assert api("complete", {"key": "job-1", "token": first["token"], "response": {"sent": 1}}).status_code == 200
        replay = api("claim", claim_body())
        assert replay.status_code == 200 and replay.json()["response"] == {"sent": 1}
    assert list(Attempt.objects.values_list("outcome", flat=True).order_by("id")) == [
        "claimed", "outcome_unknown", "completed", "replayed",
    ]


# --- references ------------------------------------------------------------------------------------

def test_references_given_with_a_completion_are_stored_with_it_and_shown(api, client, token):
    claimed = api("claim", claim_body()).json()
    references = [{"kind": "stripe.charge", "value": "ch_1"}, {"kind": "order", "value": "1042"}]
    done = api("complete", {"key": "job-1", "token": claimed["token"], "response": {}, "references": references})
    assert done.status_code == 200 and done.json()["references"] == references
    looked_up = client.get(BASE, {"key": "job-1"}, headers={"Authorization": f"Bearer {token}"}).json()
    assert looked_up["references"] == references


def test_references_given_with_a_failure_are_stored_with_it(api):
    claimed = api("claim", claim_body()).json()
    failed = api("fail", {"key": "job-1", "token": claimed["token"], "error": "declined",
                          "references": [{"kind": "stripe.charge", "value": "ch_declined"}]})
    assert failed.status_code == 200
    assert failed.json()["references"] == [{"kind": "stripe.charge", "value": "ch_declined"}]


@pytest.mark.parametrize(
    "references",
    [
        "ch_1",
        [{"kind": "Stripe Charge", "value": "ch_1"}],
        [{"kind": "stripe.charge", "value": "ch_\u202e1"}],
        [{"kind": "stripe.charge", "value": "x" * 256}],
        [{"kind": "stripe.charge"}],
        [["stripe.charge", "ch_1"]],
        [{"kind": "order", "value": str(n)} for n in range(21)],
    ],
)
def test_bad_references_are_400_and_leave_the_receipt_processing(api, references):
    claimed = api("claim", claim_body()).json()
    response = api("complete", {"key": "job-1", "token": claimed["token"], "response": {}, "references": references})
    assert response.status_code == 400 and kind(response) == "invalid-field"
    assert response.json()["field"] == "references"
    assert Receipt.objects.get().status == "processing" and not ReceiptReference.objects.exists()


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(references=st.lists(st.fixed_dictionaries({"kind": st.text(max_size=70), "value": st.text(max_size=260)}), max_size=22))
def test_any_references_are_stored_or_refused_with_a_400_never_a_500(api, references):
    Receipt.objects.all().delete()
    claimed = api("claim", claim_body()).json()
    response = api("complete", {"key": "job-1", "token": claimed["token"], "response": {}, "references": references})
    assert response.status_code in (200, 400)
    rows = set(ReceiptReference.objects.values_list("kind", "value"))
    if response.status_code == 400:
        assert rows == set() and Receipt.objects.get().status == "processing"
    else:
        assert rows == {(r["kind"], r["value"]) for r in references}
