"""idemdash/core/clients.py: a bearer token not shaped like ours costs no query; the answer to
a bad bearer token, 401 and then, per client address, 429 with Retry-After; real requests
through the JSON API, the outbox API and the machine endpoint, then through a real gunicorn
with several workers, whose counts must add up in the shared cache."""

from __future__ import annotations

import json
import secrets

import httpx
import pytest
import time_machine
from django.test import Client, RequestFactory

from idemdash.core.clients import client_for_request, create_token
from tests.gunicorn import Gunicorn

LIMIT = 4
CLAIM = "/api/v1/receipts/claim"


@pytest.fixture
def limited(settings) -> None:
    settings.API_TOKEN_FAILURE_LIMIT = LIMIT
    settings.API_TOKEN_FAILURE_WINDOW_SECONDS = 60


def bearer(token: str):
    return RequestFactory().post("/", headers={"Authorization": f"Bearer {token}"})


@pytest.mark.django_db
@pytest.mark.parametrize(
    "token",
    [
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",  # a JWT
        "idem_short",
        "idem_" + "A" * 42 + "!",
        "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",  # a DRF authtoken key
    ],
)
def test_a_bearer_token_that_cannot_be_ours_costs_no_query(django_assert_num_queries, token):
    with django_assert_num_queries(0):
        assert client_for_request(bearer(token)) is None


@pytest.mark.django_db
def test_a_token_of_our_format_is_still_looked_up_and_must_match(django_assert_num_queries):
    client, token = create_token("shop")
    assert client_for_request(bearer(token)) == client
    forged = token[:-1] + ("A" if token[-1] != "A" else "B")
    with django_assert_num_queries(1):
        assert client_for_request(bearer(forged)) is None


def _bad_token() -> str:
    return "idem_" + secrets.token_urlsafe(32)


def _claim(client: Client, token: str, address: str, key: str = "k1"):
    return client.post(CLAIM, json.dumps({"key": key, "operation": "demo.op"}), content_type="application/json",
                       HTTP_AUTHORIZATION=f"Bearer {token}", REMOTE_ADDR=address)


@pytest.mark.django_db
@time_machine.travel("2026-11-25 12:00:20", tick=False)
def test_bad_tokens_are_401_up_to_the_limit_then_429_with_retry_after(limited, client):
    answers = [_claim(client, _bad_token(), "198.51.100.40") for _ in range(LIMIT + 3)]
    assert [a.status_code for a in answers] == [401] * LIMIT + [429] * 3
    assert answers[0]["WWW-Authenticate"] == 'Bearer realm="idemdash"'
    refused = answers[-1]
    assert refused["Content-Type"] == "application/problem+json"
    assert refused["Retry-After"] == "40"
    assert refused.json()["type"] == "urn:idemdash:problem:too-many-bad-tokens"
    # Tokens not even in idemdash's format count the same: they are guesses all the same.
    assert _claim(client, "nonsense", "198.51.100.40").status_code == 429


@pytest.mark.django_db
@time_machine.travel("2026-11-25 12:00:20", tick=False)
def test_a_valid_token_is_answered_from_a_throttled_address(limited, client):
    _, token = create_token("good-neighbour")
    for _ in range(LIMIT + 1):
        _claim(client, _bad_token(), "198.51.100.41")
    assert _claim(client, _bad_token(), "198.51.100.41").status_code == 429
    assert _claim(client, token, "198.51.100.41").status_code == 201


@pytest.mark.django_db
@time_machine.travel("2026-11-25 12:00:20", tick=False)
def test_each_address_has_its_own_count_and_a_missing_token_is_not_counted(limited, client):
    for _ in range(LIMIT + 1):
        _claim(client, _bad_token(), "198.51.100.42")
    assert _claim(client, _bad_token(), "198.51.100.43").status_code == 401
    for _ in range(LIMIT + 2):
        no_token = client.post(CLAIM, "{}", content_type="application/json", REMOTE_ADDR="198.51.100.44")
        assert no_token.status_code == 401
    assert _claim(client, _bad_token(), "198.51.100.44").status_code == 401


@pytest.mark.django_db
def test_the_next_window_answers_401_again(limited, client):
    with time_machine.travel("2026-11-25 12:00:50", tick=False):
        for _ in range(LIMIT):
            _claim(client, _bad_token(), "198.51.100.45")
        assert _claim(client, _bad_token(), "198.51.100.45")["Retry-After"] == "10"
    with time_machine.travel("2026-11-25 12:01:01", tick=False):
        assert _claim(client, _bad_token(), "198.51.100.45").status_code == 401


@pytest.mark.django_db
@time_machine.travel("2026-11-25 12:00:20", tick=False)
@pytest.mark.parametrize("path", ["/api/v1/outbox", "/api/v1/stats", "/metrics"])
def test_the_outbox_api_and_the_machine_endpoints_share_the_throttle(limited, client, path):
    send = client.post if path == "/api/v1/outbox" else client.get
    for _ in range(LIMIT):
        _claim(client, _bad_token(), "198.51.100.46")
    answer = send(path, HTTP_AUTHORIZATION=f"Bearer {_bad_token()}", REMOTE_ADDR="198.51.100.46")
    assert answer.status_code == 429 and answer["Retry-After"] == "40"


# --- through gunicorn -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gunicorn(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        server = Gunicorn(
            tmp_path_factory.mktemp("gunicorn") / "gunicorn.log", "idemdash.settings", workers=3,
            API_TOKEN_FAILURE_LIMIT=str(LIMIT * 3), API_TOKEN_FAILURE_WINDOW_SECONDS="3600", TRUSTED_PROXY_COUNT="1",
        )
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_the_limit_holds_across_gunicorn_workers_and_a_valid_token_passes(gunicorn):
    limit = LIMIT * 3
    _, token = create_token("through-gunicorn")
    # The proxy (TRUSTED_PROXY_COUNT=1) says which client: one never seen before.
    address = f"198.51.100.{secrets.randbelow(200) + 50}"
    statuses = []
    for _ in range(limit + 6):
        # A new connection each time, so that any of the workers may take it.
        answer = httpx.post(gunicorn.url + CLAIM, json={"key": "k", "operation": "demo.op"}, timeout=10,
                            headers={"Authorization": f"Bearer {_bad_token()}", "X-Forwarded-For": address})
        statuses.append(answer.status_code)
    assert statuses == [401] * limit + [429] * 6, gunicorn.log()
    workers = {pid for pid, status in gunicorn.answered_by() if status == 401}
    assert len(workers) >= 2, gunicorn.answered_by()
    good = httpx.post(gunicorn.url + CLAIM, json={"key": "k", "operation": "demo.op"}, timeout=10,
                      headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": address})
    assert good.status_code == 201, good.text
