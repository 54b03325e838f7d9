"""The receipts' PostgreSQL statements: the two transitions on every protected request, each
in one statement of data-modifying CTEs, and a batch of the purge.

Through the ORM a claim takes six round trips, a replay eight and a completion seven; here
each is one, and the decision, the receipt's row and its line in the attempt log still
change together. The rules are the ORM path's (receipts/rules.py). receipts/orm.py has the
same functions for SQLite, MySQL/MariaDB and psycopg2 (idemdash/core/pg.py:usable);
store.path() chooses once per database, and both paths run the same tests. Outside a
caller's transaction a claim commits with `synchronous_commit` off: docs/receipt-store.md
("Durability") says why that is safe."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from django.db import connection
from django.db import models
from django.db.models import QuerySet

from idemdash.core.pg import cursor, insert_unless_exists
from receipts import rules, waiting
from receipts.archive import financial, insert_into_archive
from receipts.models import ArchivedReceipt, Attempt, Receipt, ReceiptReference

_RECEIPT_FIELDS = [f for f in Receipt._meta.concrete_fields if not f.primary_key]
_RECEIPT_COLUMNS = tuple(f.attname for f in Receipt._meta.concrete_fields)  # id first
# The fields a claim's insert takes as parameters. Those every new receipt starts with
# (rules.NEW) are literals in the statement instead: psycopg spends about 2 µs of the web
# process's CPU on each parameter it sends and each value it reads back.
_CLAIM_PARAMETER_FIELDS = [f for f in _RECEIPT_FIELDS if f.name not in rules.NEW]
# The attempt-log columns both statements fill, in this order.
_LOG_COLUMNS = "receipt_id, scope, key, operation, outcome, fencing_token, fingerprint, request, detail, actor, created_at"
# A claim's line also says how long the claim took (Attempt.claim_ms): what the store spent
# before the statement (a parameter) plus the server's time from the statement's start to
# the row being logged, which comes after the receipt's insert or read, lock waits
# included. One clock per part (Python's monotonic, the server's), so no skew between them.
_CLAIM_MS = "%s::float8 + 1000 * extract(epoch FROM clock_timestamp() - statement_timestamp())::float8"


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _literal(value: Any) -> str:
    """A value of rules.NEW as SQL (none of them is a caller's)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise TypeError(f"no SQL literal for {value!r}")


@functools.cache
def _claim_sql(asynchronous: bool) -> str:
    receipt, attempt = _q(Receipt._meta.db_table), _q(Attempt._meta.db_table)
    returned = "id, " + ", ".join(_q(f.column) for f in _RECEIPT_FIELDS)
    commit = ", set_config('synchronous_commit', 'off', true) AS async_commit" if asynchronous else ""
    expressions = {name: _literal(value) for name, value in rules.NEW.items()}
    # `cur` reads with the statement's snapshot, so it never sees the row `ins` inserted:
    # at most one of the two has a row. Both empty means a concurrent insert committed
    # after our snapshot was taken; the caller then looks again. A row it inserted comes
    # back as its id alone: the caller has every other value already.
    return f"""
        WITH ins AS (
            {insert_unless_exists(Receipt, _RECEIPT_FIELDS, "scope, key", "id, scope, key, operation", expressions)}
        ), cur AS (
            SELECT {returned} FROM {receipt} WHERE scope = %s AND key = %s
        ), rep AS (
            SELECT id, scope, key, operation FROM cur WHERE {rules.REPLAY.sql}
        ), log AS (
            INSERT INTO {attempt} ({_LOG_COLUMNS}, claim_ms)
            SELECT id, scope, key, operation, 'claimed', 1, %s, NULL::jsonb, '', '', %s, {_CLAIM_MS} FROM ins
            UNION ALL
            SELECT id, scope, key, operation, 'replayed', NULL, %s, NULL::jsonb, '', '', %s, {_CLAIM_MS} FROM rep
            RETURNING outcome
        )
        SELECT (SELECT id FROM ins) AS inserted, cur.*, (SELECT outcome FROM log) AS logged{commit}
        FROM (SELECT 1) AS one LEFT JOIN cur ON true
    """


# On PostgreSQL Django's get_db_prep_save returns a value of these fields unchanged when it
# already has the field's Python type (integers are not among them: Django wraps them in
# psycopg's Int2/Int4/Int8 so that a server-side prepared statement knows their type);
# calling it for every field cost more per claim than building the rest of the statement.
_PLAIN_TYPES = (
    (models.CharField, str),
    (models.TextField, str),
    (models.BooleanField, bool),
    (models.DateTimeField, datetime),
)


@functools.cache
def _preparers(names: tuple[str, ...] | None = None) -> list[tuple[str, type | None, Any]]:
    """(attname, the type passed as is, the field's get_db_prep_save) per field named, or per
    field a claim's insert takes as a parameter."""
    fields = _CLAIM_PARAMETER_FIELDS if names is None else [Receipt._meta.get_field(name) for name in names]
    return [
        (f.attname, next((t for cls, t in _PLAIN_TYPES if isinstance(f, cls)), None), f.get_db_prep_save)
        for f in fields
    ]


def _prepared(values: dict[str, Any], names: tuple[str, ...] | None = None) -> list[Any]:
    """The statement parameters of `values`' fields (`names`, or those a claim's insert takes)."""
    return [
        value if value is None or type(value) is plain else prepare(value, connection)
        for name, plain, prepare in _preparers(names)
        for value in (values[name],)
    ]


@functools.cache
def _converters(attnames: tuple[str, ...]) -> list[list]:
    fields = {f.attname: f for f in Receipt._meta.concrete_fields}
    return [fields[name].get_db_converters(connection) for name in attnames]


def claim_or_replay(values: dict[str, Any], now: datetime, spent_ms: float) -> tuple[str | None, Receipt] | None:
    """Insert the receipt described by `values` (every Receipt field but id), or read the
    existing one; `spent_ms` is what the claim spent before this statement (claim_ms). Returns (logged outcome, receipt): "claimed" (inserted), "replayed" (an
    existing receipt that replays, logged), or None (an existing receipt the caller must
    decide about; nothing was written). Returns None when the key exists but this
    statement's snapshot cannot see it yet.

    Only the replay (rules.REPLAY) is decided here. Every other decision (mismatch, in
    progress, retry after failure, lease takeover, expiry) stays in store.py, which is given
    the row this statement read.
    """
    params = _prepared(values)
    fp = values["fingerprint"]
    params += [values["scope"], values["key"], *rules.REPLAY.arguments(fingerprint=fp, now=now), fp, now, spent_ms, fp, now, spent_ms]
    with cursor() as c:
        c.execute(_claim_sql(not connection.in_atomic_block), params)
        inserted, *current = c.fetchone()
    logged = current[len(_RECEIPT_COLUMNS)]
    if inserted is not None:
        # The row as inserted, from the values it was inserted with (each of the field's type).
        return logged, Receipt.from_db(
            connection.alias, _RECEIPT_COLUMNS, [inserted, *(values[name] for name in _RECEIPT_COLUMNS[1:])]
        )
    if current[0] is None:
        return None
    return logged, _built(current, _RECEIPT_COLUMNS)


def _built(row: tuple, attnames: tuple[str, ...]) -> Receipt:
    """The Receipt of a statement's row whose first values are the fields `attnames`. Built by
    hand rather than by QuerySet.raw(), which reads the cursor's description: its column type
    lookups cost more than the rest of a claim."""
    values = list(row[: len(attnames)])
    for i, converters in enumerate(_converters(attnames)):
        for convert in converters:
            values[i] = convert(values[i], None, connection)
    return Receipt.from_db(connection.alias, attnames, values)


@functools.cache
def _settle_sql(changed: tuple[str, ...]) -> str:
    receipt, attempt = _q(Receipt._meta.db_table), _q(Attempt._meta.db_table)
    assignments = ", ".join(f"{_q(Receipt._meta.get_field(name).column)} = %s" for name in changed)
    return f"""
        WITH u AS (
            UPDATE {receipt} SET updated_at = %s, lease_expires_at = NULL, {assignments}
            WHERE scope = %s AND key = %s AND {rules.SETTLE.sql}
            RETURNING id, operation, waiters
        ), log AS (
            INSERT INTO {attempt} ({_LOG_COLUMNS})
            SELECT id, %s, %s, operation, %s, %s, '', NULL::jsonb, %s, '', %s FROM u
        )
        SELECT waiters, CASE WHEN waiters THEN pg_notify(%s, %s) END FROM u
    """


def settle(scope: str, key: str, token: int, outcome: str, detail: str, now: datetime, changes: dict[str, Any]) -> bool:
    """The fenced settle (rules.SETTLE) with its log line and NOTIFY, waking this process's
    waiters at commit. The NOTIFY goes only to a receipt with waiters (`waiters`, set by
    `announce_waiter` before a caller sleeps). False (nothing written) when `token` no longer
    owns a processing receipt."""
    changed = tuple(sorted(changes))
    params: list[Any] = [now]
    params += _prepared(changes, changed)
    params += [scope, key, *rules.SETTLE.arguments(token=token)]
    params += [scope, key, outcome, token, detail, now, waiting.CHANNEL, waiting.topic(scope, key)]
    with cursor() as c:
        c.execute(_settle_sql(changed), params)
        row = c.fetchone()
    if row is not None and row[0]:
        # Every waiter, in this process too, announced itself before it slept: a receipt
        # without waiters has nobody to wake (the statement sent other processes the NOTIFY).
        waiting.wake_on_commit(scope, key)
    return row is not None


def announce_waiter(receipt: Receipt) -> bool:
    """Ask for a NOTIFY when the receipt settles (settle sends one only to a receipt that has
    waiters). False when it is no longer processing: the caller looks again at once. Our
    UPDATE and the settle's are ordered by the row lock, so no settle is missed."""
    return bool(Receipt.objects.filter(pk=receipt.pk, status=Receipt.Status.PROCESSING).update(waiters=True))


def notify(scope: str, key: str) -> None:
    """Wake the key's waiters, here and in other processes, when the current transaction
    commits (a NOTIFY is delivered at commit)."""
    waiting.wake_on_commit(scope, key)
    with connection.cursor() as c:
        c.execute("SELECT pg_notify(%s, %s)", [waiting.CHANNEL, waiting.topic(scope, key)])


def purge_expired_receipts(due: QuerySet, now: datetime, batch_size: int) -> tuple[int, int, int]:
    """One batch of expired receipts (`due`, retention.due_receipts) in two statements: lock
    the batch's ids (with their operations, so the policy decides here which are financial),
    then delete them with `DELETE ... RETURNING` feeding the archive's INSERT. The generic
    path reads the batch's rows four times (ids, operations, archive, delete); this reads
    them twice, and a heap page dirtied by the delete is the page the archive copy was read
    from.

    The ids are locked (FOR UPDATE SKIP LOCKED) in this transaction, so no claim can take
    one of them back between the two statements; the DELETE needs no second look at "due".
    Attempt rows stay (no constraint, DO_NOTHING); the receipts' references go in the DELETE's
    statement (an index lookup that finds nothing for most batches); the purge runs this only
    while nothing else points at receipts but them (retention.purge_batches, Purger.follows).
    """
    rows = list(due.order_by("expires_at").select_for_update(skip_locked=True).values_list("pk", "operation")[:batch_size])
    if not rows:
        return 0, 0, 0
    ids = [pk for pk, _ in rows]
    operations = financial(op for _, op in rows)
    receipt = Receipt._meta
    # Their references go in the same statement (the purger `follows` them): the foreign key
    # is checked at commit, Django's PostgreSQL constraints being deferred.
    references = f"refs AS (DELETE FROM {_q(ReceiptReference._meta.db_table)} WHERE receipt_id = ANY(%s))"
    with connection.cursor() as c:
        if not operations:
            c.execute(f"WITH {references} DELETE FROM {_q(receipt.db_table)} WHERE id = ANY(%s)", [ids, ids])
            return len(ids), c.rowcount, 0
        copied = [_q(receipt.get_field(name).column) for name in ArchivedReceipt.COPIED]
        c.execute(
            f"""
            WITH {references}, gone AS (
                DELETE FROM {_q(receipt.db_table)} WHERE id = ANY(%s) RETURNING id, {', '.join(copied)}
            ), kept AS (
                {insert_into_archive(connection)}
                SELECT gone.*, %s FROM gone WHERE operation = ANY(%s) RETURNING 1
            )
            SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM kept)
            """,
            [ids, ids, now, operations],
        )
        deleted, archived = c.fetchone()
    return len(ids), deleted, archived
