from __future__ import annotations

import pytest
from django.test import RequestFactory

from receipts.auth import client_for_request, create_token


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
