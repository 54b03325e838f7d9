"""receipts/observe.py: write requests to unprotected routes noted (never their bodies, never
changing a response), and the same request again within the window counted as a would-be
duplicate, exactly; a store that refuses the notes loses them, not the request."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta

import pytest
from django.db import DatabaseError
from django.utils import timezone

from receipts import coverage, observe
from receipts.models import ObservedRequest

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.receipts.coverage_urls")]
SINCE = timedelta(hours=1)


def _post(client, path: str, body: object = None, **extra):
    return client.post(path, json.dumps(body if body is not None else {"amount": 1}), content_type="application/json", **extra)


def _counts() -> dict:
    observe.flush()
    return coverage.unprotected_counts(timezone.now() - SINCE)


def test_the_same_request_again_on_an_unprotected_route_is_one_would_be_duplicate(client):
    for _ in range(3):
        assert _post(client, "/shop/orders/7/refund/").status_code == 200
    _post(client, "/shop/orders/7/refund/", {"amount": 2})  # another body: not a duplicate
    _post(client, "/shop/orders/8/refund/")  # another order: not a duplicate
    assert _counts() == {("POST", "shop/orders/<int:pk>/refund/"): {"requests": 5, "duplicates": 2, "skipped": 0}}


def test_only_writes_to_unprotected_routes_are_noted(client):
    client.get("/anything/")
    _post(client, "/shop/orders/", headers={"Idempotency-Key": "k-1"})  # protected
    client.post("/shop/orders/list/")  # require_GET: answered 405, nothing written
    assert ObservedRequest.objects.count() == 0 and observe.flush() == 0
    _post(client, "/anything/")
    assert _counts() == {("POST", "anything/"): {"requests": 1, "duplicates": 0, "skipped": 0}}


def test_each_caller_is_counted_apart(client, django_user_model):
    _post(client, "/notes/")
    client.force_login(django_user_model.objects.create_user("ann"))
    _post(client, "/notes/")  # the same body from someone else: not a duplicate
    _post(client, "/notes/")
    assert _counts()[("POST", "notes/")] == {"requests": 3, "duplicates": 1, "skipped": 0}
    # The view never looked the user up, so neither did the observer: ann is her session's hash.
    callers = set(ObservedRequest.objects.values_list("caller", flat=True))
    assert len(callers) == 2 and "anonymous" in callers and any(c.startswith("credential:") for c in callers)


def test_a_repeat_after_the_window_is_not_a_duplicate(client, settings):
    settings.RECEIPTS_OBSERVE_WINDOW_SECONDS = 60
    _post(client, "/notes/")
    observe.flush()
    ObservedRequest.objects.update(at=timezone.now() - timedelta(seconds=61))
    _post(client, "/notes/")
    assert _counts()[("POST", "notes/")]["duplicates"] == 0


def test_a_body_over_the_limit_is_counted_as_skipped_and_never_read(client, settings, monkeypatch):
    settings.RECEIPTS_OBSERVE_MAX_BODY_BYTES = 10
    read = []
    monkeypatch.setattr(observe, "fingerprint_http", lambda *args: read.append(args) or "x")
    _post(client, "/notes/", {"text": "more than ten bytes"})
    _post(client, "/notes/", {"text": "more than ten bytes"})
    assert _counts()[("POST", "notes/")] == {"requests": 2, "duplicates": 0, "skipped": 2}
    assert read == []


def test_an_upload_is_counted_as_skipped_and_left_to_the_views_upload_handlers(client):
    for _ in range(2):
        assert client.post("/notes/", {"file": io.BytesIO(b"x" * 100)}).status_code == 200  # multipart
    assert _counts()[("POST", "notes/")] == {"requests": 2, "duplicates": 0, "skipped": 2}


def test_nothing_of_the_body_is_kept(client):
    _post(client, "/notes/", {"card": "4242 4242 4242 4242", "holder": "Ada Lovelace"})
    observe.flush()
    row = ObservedRequest.objects.values().get()
    # Words and spaced digits, which no hex digest, id or timestamp of the row can spell by chance
    # (a bare "4242" turned up in one on MariaDB).
    kept = json.dumps(row, default=str)
    assert "4242 4242" not in kept and "Lovelace" not in kept and len(row["fingerprint"]) == 64


def test_a_database_that_refuses_the_notes_loses_them_and_says_so_once_a_minute(client, monkeypatch, caplog):
    monkeypatch.setattr(observe, "_complained_at", -observe.COMPLAIN_EVERY)
    _post(client, "/notes/")

    def refusing(*args):  # the batch's statement, as a full disk answers it
        raise DatabaseError("the disk is full")

    monkeypatch.setattr(observe, "_insert", refusing)
    with caplog.at_level(logging.WARNING, logger="receipts.observe"):
        assert observe.flush() == 0
        _post(client, "/notes/")
        assert observe.flush() == 0
    assert [r.getMessage() for r in caplog.records] == [
        "observer of unprotected routes: 1 notes of unprotected requests were lost: the disk is full"]


def test_a_request_the_observer_cannot_read_still_runs(client, monkeypatch):
    monkeypatch.setattr(observe, "_seen", lambda request: 1 / 0)
    monkeypatch.setattr(observe, "_complained_at", -observe.COMPLAIN_EVERY)
    assert _post(client, "/notes/").status_code == 200
    assert observe.flush() == 0


def test_a_full_buffer_drops_the_note_not_the_request(client, monkeypatch):
    monkeypatch.setattr(observe, "BUFFER_LIMIT", 1)
    _post(client, "/notes/")
    assert _post(client, "/notes/", {"n": 2}).status_code == 200
    assert observe.flush() == 1


def test_the_notes_past_their_retention_are_purged(settings):
    now = timezone.now()
    ObservedRequest.objects.create(method="POST", route="notes/", caller="anonymous", fingerprint="a" * 64,
                                   at=now - timedelta(hours=25))
    ObservedRequest.objects.create(method="POST", route="notes/", caller="anonymous", fingerprint="a" * 64, at=now)
    assert list(observe.due_notes(now).values_list("at", flat=True)) == [now - timedelta(hours=25)]
