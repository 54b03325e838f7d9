"""The receipts' PostgreSQL statements: a claim or replay, a settle, and a purge batch, each
one statement of data-modifying CTEs where the ORM takes six to eight round trips, under the
same rules (receipts/rules.py). receipts/orm.py is the twin for every other database. Outside
a caller's transaction a claim commits with `synchronous_commit` off (docs/receipt-store.md,
"Durability")."""

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
# The fields a claim's insert takes as parameters; rules.NEW's are literals instead (psycopg
# spends about 2 µs on each parameter it sends and each value it reads back).
_CLAIM_PARAMETER_FIELDS = [f for f in _RECEIPT_FIELDS if f.name not in rules.NEW]
# The attempt-log columns both statements fill, in this order.
_LOG_COLUMNS = "receipt_id, scope, key, operation, outcome, fencing_token, fingerprint, request, detail, actor, created_at"
# Attempt.claim_ms: the store's time before the statement (a parameter) plus the server's from
# the statement's start to the row being logged; one clock per part, so no skew.
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
    # `cur` reads the statement's snapshot, so at most one of `ins` and `cur` has a row; both
    # empty means a concurrent insert committed after it. An inserted row comes back as its id.
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


# Values get_db_prep_save returns unchanged when of these types (not integers, which Django
# wraps for prepared statements): calling it for every field cost more than the statement.
_PLAIN_TYPES = (
    (models.CharField, str),
    (models.TextField, str),
    (models.BooleanField, bool),
    (models.DateTimeField, datetime),
)


@functools.cache
def _preparers(names: tuple[str, ...] | None = None) -> list[tuple[str, type | None, Any]]:
    """(attname, the type passed as is, get_db_prep_save) per field named, or per claim parameter."""
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
    """Insert the receipt of `values` (every field but id), or read the existing one: (logged
    outcome, receipt), the outcome "claimed", "replayed" or None (for the store to decide; nothing
    written); None when this statement's snapshot cannot see the key yet. `spent_ms`: claim_ms."""
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
    """The Receipt of a row whose first values are the fields `attnames`; not QuerySet.raw(),
    whose column type lookups cost more than the rest of a claim."""
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
    """The fenced settle with its log line, and a NOTIFY if it has waiters; False if it matched nothing."""
    changed = tuple(sorted(changes))
    params: list[Any] = [now]
    params += _prepared(changes, changed)
    params += [scope, key, *rules.SETTLE.arguments(token=token)]
    params += [scope, key, outcome, token, detail, now, waiting.CHANNEL, waiting.topic(scope, key)]
    with cursor() as c:
        c.execute(_settle_sql(changed), params)
        row = c.fetchone()
    if row is not None and row[0]:
        waiting.wake_on_commit(scope, key)
    return row is not None


def announce_waiter(receipt: Receipt) -> bool:
    """Ask for a NOTIFY when the receipt settles; False when it is no longer processing. The
    row lock orders this UPDATE and the settle's, so no settle is missed."""
    return bool(Receipt.objects.filter(pk=receipt.pk, status=Receipt.Status.PROCESSING).update(waiters=True))


def notify(scope: str, key: str) -> None:
    """Wake the key's waiters, here and in other processes, when the transaction commits."""
    waiting.wake_on_commit(scope, key)
    with connection.cursor() as c:
        c.execute("SELECT pg_notify(%s, %s)", [waiting.CHANNEL, waiting.topic(scope, key)])


def purge_expired_receipts(due: QuerySet, now: datetime, batch_size: int) -> tuple[int, int, int]:
    """One batch of expired receipts in two statements: lock the ids (SKIP LOCKED, so no claim
    takes one back meanwhile) with their operations, then `DELETE ... RETURNING` feeding the
    archive's INSERT, the references with them: the rows read twice, not four times."""
    rows = list(due.order_by("expires_at").select_for_update(skip_locked=True).values_list("pk", "operation")[:batch_size])
    if not rows:
        return 0, 0, 0
    ids = [pk for pk, _ in rows]
    operations = financial(op for _, op in rows)
    receipt = Receipt._meta
    # The foreign key is checked at commit: Django's PostgreSQL constraints are deferred.
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
