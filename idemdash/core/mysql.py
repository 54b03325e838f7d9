"""MySQL and MariaDB: text compared byte for byte, as PostgreSQL and SQLite compare it.

Their default collations (utf8mb4_general_ci, utf8mb4_0900_ai_ci...) compare text without
case, and the PAD SPACE ones ignore trailing spaces: `order-1`, `ORDER-1` and `order-1 `
would be one idempotency key (the second caller replayed the first one's response), one
outbox message, one webhook event. Each app's migration `exact_text` turns its tables to a
binary, no-pad collation on MySQL and MariaDB, and does nothing on any other database.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# MariaDB's, then MySQL 8's binary collation without padding; utf8mb4_bin (padding) is the
# last resort of a server that has neither.
NO_PAD_BINARY = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")


def collation(connection: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COLLATION_NAME FROM information_schema.COLLATIONS WHERE COLLATION_NAME IN (%s, %s)",
            NO_PAD_BINARY,
        )
        found = {row[0] for row in cursor.fetchall()}
    return next((name for name in NO_PAD_BINARY if name in found), "utf8mb4_bin")


def exact_text(app_label: str) -> migrations.RunPython:
    """A migration operation: every table of `app_label` (as of this migration) compares its
    text byte for byte on MySQL/MariaDB."""

    def forwards(apps: Any, schema_editor: Any) -> None:
        connection = schema_editor.connection
        if connection.vendor != "mysql":
            return
        chosen = collation(connection)
        for model in apps.get_app_config(app_label).get_models():
            if model._meta.managed and not model._meta.proxy:
                table = schema_editor.quote_name(model._meta.db_table)
                schema_editor.execute(f"ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4 COLLATE {chosen}")

    # Not atomic: MySQL commits DDL on the spot, and Django refuses DDL inside a transaction there.
    return migrations.RunPython(forwards, migrations.RunPython.noop, atomic=False)
