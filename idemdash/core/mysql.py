"""MySQL and MariaDB: text compared byte for byte, as PostgreSQL and SQLite compare it, and
deadlocks retried.

Their default collations compare text without case, and the PAD SPACE ones ignore trailing
spaces: `order-1`, `ORDER-1` and `order-1 ` would be one idempotency key (the second caller
replayed the first one's response), one outbox message, one webhook event. Each app's
migration `exact_text` turns its tables to a binary, no-pad collation on MySQL and MariaDB,
and does nothing on any other database. `retry_deadlocks` runs a unit of work that InnoDB
chose as a deadlock's victim again."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import OperationalError, connection, migrations

F = TypeVar("F", bound=Callable[..., Any])

ER_LOCK_DEADLOCK = 1213
# A deadlock needs a race; five in a row would mean something else is wrong.
DEADLOCK_ATTEMPTS = 5

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


def retry_deadlocks(func: F) -> F:
    """Run `func` again (up to DEADLOCK_ATTEMPTS times, after a few random milliseconds) when
    MySQL/MariaDB chose it as a deadlock's victim. Only when `func` owns its transaction:
    inside a caller's atomic block InnoDB rolled back the caller's work too, which only the
    caller can redo, so the error goes up. Elsewhere, and on any other database, `func` runs
    once, as written.

    InnoDB picks its index by estimates, and given a receipt's id, fencing token and status it
    may still read through the status index, locking other rows' entries on the way; two
    settles then deadlock (ER_LOCK_DEADLOCK). And callers inserting one key that a purge has
    just deleted all wait on the deleted entry, and when the purge commits MySQL 8 may roll
    all but one back (MariaDB 10.11 lets them wait on the first insert and answers a
    duplicate key instead: tests/receipts/test_store.py races the two). InnoDB rolls the
    victim's whole transaction back, so a unit of work that owns its transaction may simply
    run again, as MySQL's manual advises ("How to Minimize and Handle Deadlocks")."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        if connection.vendor != "mysql" or connection.in_atomic_block:
            return func(*args, **kwargs)
        for attempt in range(1, DEADLOCK_ATTEMPTS + 1):
            try:
                return func(*args, **kwargs)
            except OperationalError as exc:
                if attempt == DEADLOCK_ATTEMPTS or not exc.args or exc.args[0] != ER_LOCK_DEADLOCK:
                    raise
            time.sleep(random.uniform(0, 0.005 * attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    return run  # type: ignore[return-value]
