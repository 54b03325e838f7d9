"""The database connection dies mid-request (`pg_terminate_backend`): the client gets a
503 problem, not a 500; nothing half-written remains; the next request works."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.postgres, pytest.mark.urls("tests.faults.urls")]


@pytest.mark.django_db(transaction=True)
def test_a_connection_killed_mid_request_answers_503_and_leaves_nothing_half_written(client):
    response = client.post("/lose-db/")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/problem+json"
    assert response["Retry-After"] == "1"
    assert response.json()["type"] == "urn:idemdash:problem:database-unavailable"
    # The first row was written in the same transaction as the lost second one: gone too.
    follow_up = client.get("/count/")
    assert follow_up.status_code == 200
    assert follow_up.json() == {"rows": 0}
