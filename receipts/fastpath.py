"""PostgreSQL statements for the two transitions on every protected request.

Through the ORM, claiming a new key takes six round trips (BEGIN, SAVEPOINT, INSERT,
RELEASE, INSERT of the log line, COMMIT), replaying a completed key eight (the failed
insert in its savepoint, a SELECT, the log line) and completing one seven. Each is here
a single statement built from data-modifying CTEs, so the decision, the receipt's row and
its line in the attempt log still change together, atomically, and the rules are the same
as store.py's:

- `claim_or_replay` inserts the receipt (ON CONFLICT DO NOTHING) and logs "claimed"; or,
  when the key exists, returns its row and, if it is a replay (same fingerprint, not
  expired, completed or burned), logs "replayed". Every other decision (mismatch, in
  progress, retry after failure, lease takeover, expiry) stays in store.py, which is given
  the row this statement read.
- `settle` is the fenced UPDATE (token and status) with its log line, and a NOTIFY when
  a caller waits for the receipt (`waiters`, set by store.claim before it sleeps); it
  changes nothing when the token no longer owns the receipt.

SQLite has no data-modifying CTEs, so it keeps the ORM path, as does PostgreSQL through
psycopg2 (usable()); both paths run the same tests.

Durability of a claim: outside a caller's transaction, the claim statement commits with
`synchronous_commit = off` for itself alone (set_config(..., is_local => true)), so it
does not wait for its WAL flush. That is safe here because nothing a claim enables is
durable before a later synchronous commit, which flushes all earlier WAL with it: the
decorator completes in the view's own (synchronous) transaction, and an API caller's
completion is synchronous. A server crash can lose only a claim whose completion never
committed, and then the next attempt runs, as it would after the lease of a crashed
worker ran out. A replay's log line is a statistic; losing one in a crash loses no
result. Inside a caller's own transaction the setting would apply to the caller's
commit too, so there the statement leaves the commit synchronous.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from django.db import connection

from receipts.models import Attempt, Receipt

_RECEIPT_FIELDS = [f for f in Receipt._meta.concrete_fields if not f.primary_key]
_RECEIPT_COLUMNS = [f.attname for f in Receipt._meta.concrete_fields]  # id first
_REPLAYABLE = (
    "status = 'completed' OR (status = 'failed' AND NOT retryable)"
)
# The attempt-log columns both statements fill, in this order.
_LOG_COLUMNS = "receipt_id, scope, key, operation, outcome, fencing_token, fingerprint, request, detail, actor, created_at"


def usable() -> bool:
    """PostgreSQL through psycopg 3. The statements need psycopg 3's server-binding cursor to
    be prepared (cursor() below); a host on psycopg2, or on another database, runs the same
    rules through the ORM in store.py. Decided per call from the connection's own backend
    and driver module, so it costs an attribute lookup and never an import."""
    return connection.vendor == "postgresql" and connection.Database.__name__ == "psycopg"


@contextlib.contextmanager
def cursor() -> Iterator[Any]:
    """Django's cursor for one of these statements, prepared on the server when the project
    allows prepared statements.

    Planning a statement of several CTEs costs PostgreSQL more than running it (measured
    with pgbench: a protected request's statements run 1.8x as fast prepared). Django binds
    parameters on the client (psycopg's ClientCursor, which never prepares) and turns
    prepared statements off unless OPTIONS sets `prepare_threshold` (PgBouncer in
    transaction mode before 1.21 cannot route them). Where it is set, these few statements
    are prepared once per connection by swapping a server-binding psycopg cursor into
    Django's wrapper, which keeps Django's health check, error translation and query
    logging; the ORM's own queries are unaffected. Only on persistent connections
    (CONN_MAX_AGE not 0): preparing costs a round trip of its own, which a connection
    opened for one request would pay every time.
    """
    with connection.cursor() as wrapper:
        if connection.settings_dict["CONN_MAX_AGE"] != 0 and connection.connection.prepare_threshold is not None:
            wrapper.cursor.close()
            wrapper.cursor = _prepared_cursor_class()(connection.connection)
            wrapper.cursor.logged = connection.queries_logged
        yield wrapper


@functools.cache
def _prepared_cursor_class() -> type:
    from django.db.backends.postgresql.base import ServerBindingCursor

    class PreparedCursor(ServerBindingCursor):
        logged = False  # set when Django logs queries (DEBUG, tests)

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            result = super().execute(query, params, prepare=True, **kwargs)
            if self.logged and self._query is None:
                # psycopg keeps no record of a query it ran prepared; Django's query log
                # reads that record (connection.ops.last_executed_query).
                self._query = self._convert_query(query, params)
            return result

    return PreparedCursor


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def insert_unless_exists(model: type, fields: list, conflict: str, returned: str) -> str:
    """An INSERT of one row of `fields` (one %s each) that does nothing when the unique
    `conflict` columns already exist, for a CTE; webhooks/fastpath.py uses it too."""
    columns = ", ".join(_q(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    return (
        f"INSERT INTO {_q(model._meta.db_table)} ({columns}) VALUES ({placeholders}) "
        f"ON CONFLICT ({conflict}) DO NOTHING RETURNING {returned}"
    )


@functools.cache
def _claim_sql(asynchronous: bool) -> str:
    receipt, attempt = _q(Receipt._meta.db_table), _q(Attempt._meta.db_table)
    returned = "id, " + ", ".join(_q(f.column) for f in _RECEIPT_FIELDS)
    commit = ", set_config('synchronous_commit', 'off', true) AS async_commit" if asynchronous else ""
    # `cur` reads with the statement's snapshot, so it never sees the row `ins` inserted:
    # at most one of the two has a row. Both empty means a concurrent insert committed
    # after our snapshot was taken; the caller then looks again.
    return f"""
        WITH ins AS (
            {insert_unless_exists(Receipt, _RECEIPT_FIELDS, "scope, key", returned)}
        ), cur AS (
            SELECT {returned} FROM {receipt} WHERE scope = %s AND key = %s
        ), rep AS (
            SELECT id, scope, key, operation FROM cur
            WHERE fingerprint = %s AND expires_at > %s AND ({_REPLAYABLE})
        ), log AS (
            INSERT INTO {attempt} ({_LOG_COLUMNS})
            SELECT id, scope, key, operation, 'claimed', 1, %s, NULL::jsonb, '', '', %s FROM ins
            UNION ALL
            SELECT id, scope, key, operation, 'replayed', NULL, %s, NULL::jsonb, '', '', %s FROM rep
            RETURNING outcome
        )
        SELECT u.*, (SELECT outcome FROM log) AS logged{commit}
        FROM (SELECT * FROM ins UNION ALL SELECT * FROM cur) AS u
    """


@functools.cache
def _converters() -> list[list]:
    return [f.get_db_converters(connection) for f in Receipt._meta.concrete_fields]


def claim_or_replay(values: dict[str, Any], now: datetime) -> tuple[str | None, Receipt] | None:
    """Insert the receipt described by `values` (every Receipt field but id), or read the
    existing one. Returns (logged outcome, receipt): "claimed" (inserted), "replayed" (an
    existing receipt that replays, logged), or None (an existing receipt the caller must
    decide about; nothing was written). Returns None when the key exists but this
    statement's snapshot cannot see it yet.
    """
    params = [f.get_db_prep_save(values[f.attname], connection) for f in _RECEIPT_FIELDS]
    fp = values["fingerprint"]
    params += [values["scope"], values["key"], fp, now, fp, now, fp, now]
    with cursor() as c:
        c.execute(_claim_sql(not connection.in_atomic_block), params)
        row = c.fetchone()
    if row is None:
        return None
    # Built by hand rather than by QuerySet.raw(), which reads the cursor's description: its
    # column type lookups cost more than the rest of this function.
    values = list(row[: len(_RECEIPT_COLUMNS)])
    for i, converters in enumerate(_converters()):
        for convert in converters:
            values[i] = convert(values[i], None, connection)
    return row[len(_RECEIPT_COLUMNS)], Receipt.from_db(connection.alias, _RECEIPT_COLUMNS, values)


@functools.cache
def _settle_sql(changed: tuple[str, ...]) -> str:
    receipt, attempt = _q(Receipt._meta.db_table), _q(Attempt._meta.db_table)
    assignments = ", ".join(f"{_q(Receipt._meta.get_field(name).column)} = %s" for name in changed)
    return f"""
        WITH u AS (
            UPDATE {receipt} SET updated_at = %s, lease_expires_at = NULL, {assignments}
            WHERE scope = %s AND key = %s AND fencing_token = %s AND status = 'processing'
            RETURNING id, operation, waiters
        ), log AS (
            INSERT INTO {attempt} ({_LOG_COLUMNS})
            SELECT id, %s, %s, operation, %s, %s, '', NULL::jsonb, %s, '', %s FROM u
        )
        SELECT id, CASE WHEN waiters THEN pg_notify(%s, %s) END FROM u
    """


def settle(
    scope: str,
    key: str,
    token: int,
    outcome: str,
    detail: str,
    now: datetime,
    changes: dict[str, Any],
    *,
    channel: str,
    topic: str,
) -> bool:
    """The fenced settle with its log line and NOTIFY. False (nothing written) when
    `token` no longer owns a processing receipt."""
    changed = tuple(sorted(changes))
    params: list[Any] = [now]
    params += [Receipt._meta.get_field(name).get_db_prep_save(changes[name], connection) for name in changed]
    params += [scope, key, token, scope, key, outcome, token, detail, now, channel, topic]
    with cursor() as c:
        c.execute(_settle_sql(changed), params)
        return c.fetchone() is not None
