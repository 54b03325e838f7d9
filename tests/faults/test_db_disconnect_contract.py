"""The database connection dies mid-request, at each step of the receipt contract: at the
claim, inside the view after it wrote, and at completion, through the @idempotent decorator
and through the JSON API's claim/complete.

The connection is really lost: a PostgreSQL trigger on a marked key terminates its own
backend (`pg_terminate_backend(pg_backend_pid())`), or the view has a second connection
terminate it. Each time the client gets the 503 `database-unavailable` problem with
Retry-After; afterwards the receipt is absent, or processing under a lease that a retry
takes over; the view's own rows are gone; and retrying as docs/operations.md tells a client to
(503: retry; 409: retry after Retry-After) completes the key exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from idemdash.core.clients import create_token
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt
from tests.faults.urls import VIEW_ROW_ACTION

pytestmark = [pytest.mark.postgres, pytest.mark.urls("tests.faults.urls"), pytest.mark.django_db(transaction=True)]

LEASE = 1


@pytest.fixture(autouse=True)
def _short_leases(settings):
    # A lease left behind by a lost connection runs out in a second, so the retry that
    # takes it over comes quickly.
    settings.RECEIPTS_LEASE_SECONDS = LEASE
    settings.RECEIPTS_MIN_LEASE_SECONDS = LEASE  # the API's callers ask for it too


@contextmanager
def backend_dies(event: str, table: str, condition: str) -> Iterator[None]:
    """While inside, a statement `event` (e.g. "BEFORE INSERT") on `table` whose row matches
    `condition` (over NEW) kills the connection that runs it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION idemdash_fault_die() RETURNS trigger AS $$ "
            "BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER idemdash_fault_die {event} ON {table} FOR EACH ROW "
            f"WHEN ({condition}) EXECUTE FUNCTION idemdash_fault_die()"
        )
    try:
        yield
    finally:
        connection.close()  # the test client shares this connection: it may be the dead one
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER idemdash_fault_die ON {table}")
            cursor.execute("DROP FUNCTION idemdash_fault_die()")


def assert_unavailable(response) -> None:
    assert response.status_code == 503, response.content[:500]
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"]
    assert response.json()["type"] == "urn:idemdash:problem:database-unavailable"


def assert_given_back(key: str) -> None:
    """Released by the decorator once the database answered again: retryable, with no
    stored response, so the client's retry runs the view (a lost connection is not the
    operation's failure). Were the database still away, the lease would run out instead."""
    receipt = Receipt.objects.get(key=key)
    assert (receipt.status, receipt.retryable, receipt.response_status, receipt.response_body) == ("failed", True, None, "")
    assert receipt.lease_expires_at is None
    assert Attempt.objects.filter(key=key, outcome="released").count() == 1


def view_rows(key: str) -> int:
    return AuditEntry.objects.filter(action=VIEW_ROW_ACTION, object_id=key).count()


def completions(key: str) -> int:
    return Attempt.objects.filter(key=key, outcome="completed").count()


def retry_until_settled(send, *, settled: set[int], deadline_seconds: float = 15):
    """Retry as a client should: again after a 503, after Retry-After on a 409."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        response = send()
        if response.status_code in settled or time.monotonic() > deadline:
            return response
        assert response.status_code in (409, 503), response.content[:500]
        time.sleep(float(response.get("Retry-After", "0.2")) if response.status_code == 409 else 0.2)


# --- the @idempotent decorator ---------------------------------------------------------------

def capture(client, key: str, *, lose_db: bool = False):
    headers = {"Idempotency-Key": key, **({"X-Fault": "lose-db"} if lose_db else {})}
    return client.post("/capture/", b'{"amount": 5}', content_type="application/json", headers=headers)


def test_a_connection_lost_at_the_decorators_claim_leaves_no_receipt_and_the_retry_runs_once(client):
    key = "die-at-claim"
    with backend_dies("BEFORE INSERT", "receipts_receipt", f"NEW.key = '{key}'"):
        assert_unavailable(capture(client, key))
    assert not Receipt.objects.filter(key=key).exists()
    assert view_rows(key) == 0
    assert capture(client, key).status_code == 201
    assert capture(client, key)["Idempotent-Replayed"] == "true"
    assert (view_rows(key), completions(key)) == (1, 1)


def test_a_connection_lost_inside_the_view_rolls_its_writes_back_and_a_retry_takes_over(client):
    key = "die-in-view"
    assert_unavailable(capture(client, key, lose_db=True))
    assert_given_back(key)
    assert view_rows(key) == 0  # written, then rolled back with the lost transaction
    # At once, not after the lease: the key was given back.
    assert capture(client, key).status_code == 201
    assert Attempt.objects.filter(key=key, outcome="retried_after_failure").count() == 1
    assert (view_rows(key), completions(key)) == (1, 1)
    assert Receipt.objects.get(key=key).status == "completed"


def test_a_connection_lost_at_the_decorators_completion_keeps_neither_view_rows_nor_a_result(client):
    key = "die-at-complete"
    with backend_dies("BEFORE UPDATE", "receipts_receipt", f"NEW.key = '{key}' AND NEW.status = 'completed'"):
        assert_unavailable(capture(client, key))
    assert_given_back(key)
    assert view_rows(key) == 0
    assert completions(key) == 0
    assert capture(client, key).status_code == 201
    assert (view_rows(key), completions(key)) == (1, 1)


def test_a_connection_lost_in_an_operation_that_burns_its_key_on_failure_does_not_burn_it(client, settings):
    """The client was told 503, "nothing stored, retry": its retry must run, not replay a 500."""
    settings.RECEIPTS_OPERATIONS = {"payment.*": {"on_failure": "burn"}}
    key = "die-in-burning-view"
    assert_unavailable(capture(client, key, lose_db=True))
    assert_given_back(key)
    retried = capture(client, key)
    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried
    assert (view_rows(key), completions(key)) == (1, 1)


# --- the JSON API ----------------------------------------------------------------------------

@pytest.fixture
def api(client):
    token = create_token("disconnect")[1]

    def call(endpoint: str, body: dict):
        return client.post(f"/api/v1/receipts/{endpoint}", body, content_type="application/json",
                           headers={"Authorization": f"Bearer {token}"})

    return call


def claim_body(key: str) -> dict:
    return {"key": key, "operation": "email.send", "request": {"to": "a@example.com"}, "lease_seconds": LEASE}


def test_a_connection_lost_at_the_api_claim_leaves_no_receipt(api):
    key = "api-die-at-claim"
    with backend_dies("BEFORE INSERT", "receipts_receipt", f"NEW.key = '{key}'"):
        assert_unavailable(api("claim", claim_body(key)))
    assert not Receipt.objects.filter(key=key).exists()
    assert not Attempt.objects.filter(key=key).exists()
    claimed = api("claim", claim_body(key))
    assert claimed.status_code == 201 and claimed.json()["outcome"] == "claimed"
    assert api("complete", {"key": key, "token": claimed.json()["token"], "response": {"id": 1}}).status_code == 200
    assert completions(key) == 1


def test_a_connection_lost_while_logging_the_api_claim_stores_neither_and_the_retry_claims(api):
    """The claim and its line in the attempt log commit in one transaction: a death at the
    log line leaves no receipt behind, so the retry simply claims."""
    key = "api-die-at-claim-log"
    with backend_dies("BEFORE INSERT", "receipts_attempt", f"NEW.key = '{key}' AND NEW.outcome = 'claimed'"):
        assert_unavailable(api("claim", claim_body(key)))
    assert not Receipt.objects.filter(key=key).exists()
    retried = retry_until_settled(lambda: api("claim", claim_body(key)), settled={201})
    assert retried.status_code == 201 and retried.json()["outcome"] == "claimed"
    assert api("complete", {"key": key, "token": retried.json()["token"], "response": {"id": 2}}).status_code == 200
    assert completions(key) == 1


@pytest.mark.slow
def test_a_caller_that_never_received_its_committed_claim_retries_into_a_lease_takeover(api):
    """The claim committed but its answer was lost on the way (the connection dropped after
    the commit): the caller never learnt its token. Its retry is refused while the lease
    lives and takes the key over once it has run out."""
    key = "api-lost-claim-answer"
    lost = api("claim", claim_body(key))
    assert lost.status_code == 201  # ...and the caller never reads it
    receipt = Receipt.objects.get(key=key)
    assert receipt.status == "processing" and receipt.lease_expires_at is not None
    retried = retry_until_settled(lambda: api("claim", claim_body(key)), settled={201})
    assert retried.status_code == 201 and retried.json()["outcome"] == "lease_takeover"
    token = retried.json()["token"]
    assert token == receipt.fencing_token + 1
    assert api("complete", {"key": key, "token": token, "response": {"id": 2}}).status_code == 200
    # The first claimer's token, had it ever learnt it, stores nothing now.
    stale = api("complete", {"key": key, "token": receipt.fencing_token, "response": {"id": 1}})
    assert stale.status_code == 409 and stale.json()["type"].endswith(":stale-token")
    assert completions(key) == 1
    assert Receipt.objects.get(key=key).response_body == '{"id":2}'


def test_a_connection_lost_at_the_api_completion_stores_nothing_and_the_same_completion_succeeds_on_retry(api):
    key = "api-die-at-complete"
    claimed = api("claim", claim_body(key)).json()
    complete = {"key": key, "token": claimed["token"], "response": {"id": 3}}
    with backend_dies("BEFORE UPDATE", "receipts_receipt", f"NEW.key = '{key}' AND NEW.status = 'completed'"):
        assert_unavailable(api("complete", complete))
    receipt = Receipt.objects.get(key=key)
    assert (receipt.status, receipt.response_body, receipt.fencing_token) == ("processing", "", claimed["token"])
    assert completions(key) == 0
    # Retried at once, the completion still holds the token: it lands, exactly once.
    done = api("complete", complete)
    assert done.status_code == 200 and done.json()["status"] == "completed"
    assert api("complete", complete).status_code == 200  # and once more: the same settlement
    assert completions(key) == 1


@contextmanager
def backend_dies_once(table: str, condition: str) -> Iterator[None]:
    """Like backend_dies for a BEFORE INSERT, but only the first matching statement dies."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE SEQUENCE idemdash_fault_once")
    try:
        with backend_dies("BEFORE INSERT", table, f"{condition} AND nextval('idemdash_fault_once') = 1"):
            yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SEQUENCE idemdash_fault_once")


def test_the_python_client_retries_a_503_and_runs_the_work_once(live_server):
    """The documented contract, followed by the Python client (idemdash_client) itself: the claim meets a
    lost database connection (503, nothing stored), the client waits Retry-After and claims
    again, runs the work once and completes it."""
    from idemdash_client import IdempotencyClient

    key = "client-retries-503"
    _, token = create_token("client-503")
    calls = []
    with backend_dies_once("receipts_receipt", f"NEW.key = '{key}'"):
        with IdempotencyClient(live_server.url, token, wait_seconds=0, max_backoff=0.2) as idem:
            result = idem.run_once(key, "email.send", lambda: calls.append(1) or {"sent": True})
    assert result == {"sent": True} and calls == [1]
    receipt = Receipt.objects.get(key=key)
    assert receipt.status == "completed" and completions(key) == 1
    assert list(Attempt.objects.filter(key=key).order_by("id").values_list("outcome", flat=True)) == [
        "claimed", "completed"
    ]
