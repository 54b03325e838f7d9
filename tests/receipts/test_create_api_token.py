from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import RequestFactory

from idemdash.core.clients import client_for_request, hash_token
from idemdash.core.models import ApiClient

pytestmark = pytest.mark.django_db


def run(name: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("create_api_token", name, stdout=out, stderr=err)
    return out.getvalue().strip(), err.getvalue()


def test_it_prints_a_token_that_authenticates_the_new_client():
    token, notice = run("billing")
    client = ApiClient.objects.get(name="billing")
    assert "not shown again" in notice
    request = RequestFactory().get("/", headers={"Authorization": f"Bearer {token}"})
    assert client_for_request(request) == client
    assert client.scope == "client:billing"


def test_it_stores_only_the_tokens_hash():
    token, _ = run("billing")
    client = ApiClient.objects.get()
    assert client.token_hash == hash_token(token) != token
    assert token.startswith(client.token_prefix) and len(client.token_prefix) < len(token)


def test_it_refuses_a_name_that_exists():
    run("billing")
    with pytest.raises(CommandError, match="exists already"):
        run("billing")
    assert ApiClient.objects.count() == 1


def test_two_clients_get_different_tokens():
    assert run("a")[0] != run("b")[0]
