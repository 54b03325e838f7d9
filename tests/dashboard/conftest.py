from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.test import Client


def _member(django_user_model, username: str, group: str | None):
    user = django_user_model.objects.create_user(username, password="pw-" + username)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def viewer(django_user_model):
    return _member(django_user_model, "vera", "viewers")


@pytest.fixture
def operator(django_user_model):
    return _member(django_user_model, "otto", "operators")


@pytest.fixture
def outsider(django_user_model):
    """Logged in, but in no group."""
    return _member(django_user_model, "nobody", None)


@pytest.fixture
def viewer_client(viewer) -> Client:
    c = Client()
    c.force_login(viewer)
    return c


@pytest.fixture
def operator_client(operator) -> Client:
    c = Client()
    c.force_login(operator)
    return c


@pytest.fixture
def outsider_client(outsider) -> Client:
    c = Client()
    c.force_login(outsider)
    return c
