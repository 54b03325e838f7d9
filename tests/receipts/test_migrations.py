"""receipts/migrations/0010_session_reference.py: receipts written when a receipt recorded the
caller's session key take the keyed reference the code records now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from receipts.decorators import session_reference
from receipts.models import Receipt

BEFORE = ("receipts", "0009_exact_text")
REPLACING = ("receipts", "0010_session_reference")


@pytest.mark.django_db(transaction=True)
def test_migrating_replaces_each_stored_session_key_by_its_reference():
    executor = MigrationExecutor(connection)
    executor.migrate([BEFORE])
    # Written as the receipts of that time were (today's store writes columns added since).
    receipts = executor.loader.project_state([BEFORE]).apps.get_model("receipts", "Receipt").objects
    now = timezone.now()
    for key, session_id in [("k-key", "sessionkey123"), ("k-none", ""), ("k-done", session_reference("other"))]:
        receipts.create(scope="user:1", key=key, operation="order.create", fingerprint="f", session_id=session_id,
                        created_at=now, updated_at=now, expires_at=now + timedelta(days=1), lease_expires_at=now)
    MigrationExecutor(connection).migrate([REPLACING])
    assert dict(Receipt.objects.values_list("key", "session_id")) == {
        "k-key": session_reference("sessionkey123"),
        "k-none": "",
        "k-done": session_reference("other"),  # already a reference: left alone
    }
