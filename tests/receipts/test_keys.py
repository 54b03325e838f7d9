"""What a key may be (receipts/keys.py): the one check each front door (the decorator, run_once,
the JSON API) makes before anything is claimed. The header's parsing is proven against
hostile input (tests/faults/test_bad_input.py), an operation's check through each door
(test_decorators.py, test_inprocess.py)."""

from __future__ import annotations

import pytest

from receipts import keys


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there", "nl\n", None, 7])
def test_malformed_keys_are_refused(key):
    with pytest.raises(keys.InvalidKey):
        keys.validate_key(key)


@pytest.mark.parametrize("key", ["a", " spaced ", "x" * 255, "order-1:refund/2"])
def test_printable_ascii_keys_up_to_255_characters_are_taken_as_they_are(key):
    assert keys.validate_key(key) == key


@pytest.mark.django_db
def test_the_known_caller_is_the_user_once_looked_up_else_the_credentials_and_never_a_query(
        rf, django_user_model, django_assert_num_queries):
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware

    user = django_user_model.objects.create_user("ann")
    request = rf.post("/notes/", HTTP_AUTHORIZATION="Bearer not-ours")
    SessionMiddleware(lambda r: None).process_request(request)
    AuthenticationMiddleware(lambda r: None).process_request(request)  # a lazy user, not looked up
    with django_assert_num_queries(0):
        assert keys.known_caller(request) == keys.credential_scope(request)
    assert keys.known_caller(rf.post("/notes/")) == "anonymous"
    request.user  # noqa: B018 -- a view's look at its user
    request.user = user  # as a view's authentication leaves it
    assert keys.known_caller(request) == f"user:{user.pk}"


@pytest.mark.django_db
def test_the_known_caller_is_the_user_an_async_middleware_looked_up(rf, django_user_model):
    from asgiref.sync import async_to_sync
    from django.contrib.auth import login
    from django.contrib.auth.middleware import AuthenticationMiddleware
    from django.contrib.sessions.middleware import SessionMiddleware

    user = django_user_model.objects.create_user("bo")
    request = rf.post("/notes/")
    SessionMiddleware(lambda r: None).process_request(request)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")  # a session naming bo
    AuthenticationMiddleware(lambda r: None).process_request(request)
    assert keys.known_caller(request) == "anonymous"  # nothing looked up yet, and no credential sent
    # As Django's async RemoteUserMiddleware looks: `request.user` stays lazy.
    assert async_to_sync(request.auser)().pk == user.pk
    assert keys.known_caller(request) == f"user:{user.pk}"
