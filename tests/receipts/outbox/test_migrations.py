"""receipts/outbox/migrations/0006_audit_actions_named_by_their_verbs.py: audit entries
written under the outbox's old action names take the names the code writes and reads now."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from idemdash.core import audit
from receipts.models import AuditEntry
from tests.dashboard.build import outbox_message

BEFORE = ("outbox", "0005_exact_text")
RENAMING = ("outbox", "0006_audit_actions_named_by_their_verbs")


@pytest.mark.django_db(transaction=True)
def test_migrating_gives_entries_stored_under_the_old_action_names_the_current_ones(back_to_the_latest_migrations):
    message = outbox_message("m1", "pending")
    MigrationExecutor(connection).migrate([BEFORE])
    for old in ("outbox.retry_now", "outbox.requeue_dead", "outbox.release", "receipt.release"):
        audit.record("otto", old, message, "before", "after", detail=old)
    MigrationExecutor(connection).migrate([RENAMING])
    assert dict(AuditEntry.objects.values_list("detail", "action")) == {
        "outbox.retry_now": "outbox_message.send_now",
        "outbox.requeue_dead": "outbox_message.send_again",
        "outbox.release": "outbox_message.release",
        "receipt.release": "receipt.release",  # not one of the renamed: left alone
    }
