"""receipts/migrations/0010_session_reference.py: receipts written when a receipt recorded the
caller's session key take the keyed reference the code records now."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from receipts import store
from receipts.decorators import session_reference
from receipts.models import Receipt

BEFORE = ("receipts", "0009_exact_text")
REPLACING = ("receipts", "0010_session_reference")


@pytest.mark.django_db(transaction=True)
def test_migrating_replaces_each_stored_session_key_by_its_reference():
    MigrationExecutor(connection).migrate([BEFORE])
    store.claim("user:1", "k-key", "order.create", {}, fingerprint="f", session_id="sessionkey123")
    store.claim("user:1", "k-none", "order.create", {}, fingerprint="f")
    store.claim("user:1", "k-done", "order.create", {}, fingerprint="f", session_id=session_reference("other"))
    MigrationExecutor(connection).migrate([REPLACING])
    assert dict(Receipt.objects.values_list("key", "session_id")) == {
        "k-key": session_reference("sessionkey123"),
        "k-none": "",
        "k-done": session_reference("other"),  # already a reference: left alone
    }
