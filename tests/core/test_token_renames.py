"""The units' tokens renamed fencing_token (docs/architecture.md, section 8) keep their
columns: the migrations change Django's state only."""

from __future__ import annotations

from io import StringIO

import pytest
from django.apps import apps
from django.core.management import call_command

# Outside a test transaction: SQLite's schema editor, which sqlmigrate opens, refuses to
# start inside one.
pytestmark = pytest.mark.django_db(transaction=True)

RENAMES = [
    ("webhooks", "0006_event_fencing_token", "webhooks.WebhookEvent"),
    ("outbox", "0004_fencing_token", "outbox.OutboxMessage"),
    ("outbox", "0004_fencing_token", "outbox.OutboxAttempt"),
]


@pytest.mark.parametrize("app, migration, _", RENAMES)
def test_the_rename_migration_prints_no_sql(app, migration, _):
    out = StringIO()
    call_command("sqlmigrate", app, migration, stdout=out)
    statements = [
        line for line in out.getvalue().splitlines()
        if line.strip() and not line.startswith("--") and line not in ("BEGIN;", "COMMIT;")
    ]
    assert statements == []


@pytest.mark.parametrize("_, __, model", RENAMES)
def test_fencing_token_keeps_its_column(_, __, model):
    assert apps.get_model(model)._meta.get_field("fencing_token").column == "claim_token"
