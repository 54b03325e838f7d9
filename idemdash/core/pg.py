"""PostgreSQL through psycopg 3: the prepared cursor the apps' one-statement fast paths run
on, and the choice between those fast paths and their plain-ORM twins.

Each app keeps its PostgreSQL statements in one module (receipts/pg.py, webhooks/pg.py)
beside a twin with the same functions written with the ORM (receipts/orm.py,
webhooks/orm.py). `choose` picks one of the two for a database the first time that
database is used, so no caller branches on the database. This is the one module that
touches psycopg's cursor or Django's cursor internals; tests/core/test_dependency_guards.py
pins them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils.asyncio import async_unsafe


def usable(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """PostgreSQL through psycopg 3. The statements need psycopg 3's server-binding cursor to
    be prepared (cursor() below); a host on psycopg2, or on another database, runs the same
    rules through the ORM. Read from the backend's class and its driver module, so it needs
    no connection and never imports a driver."""
    wrapper = connections[alias]
    return wrapper.vendor == "postgresql" and type(wrapper).Database.__name__ == "psycopg"


def choose(pg: ModuleType, orm: ModuleType) -> Callable[..., ModuleType]:
    """A function of a database alias that returns `pg` where the database is usable(), else
    `orm`; decided the first time each alias is asked about. The two modules have the same
    functions, so the caller just calls the one it is given."""

    chosen: dict[str, ModuleType] = {}

    def path(alias: str = DEFAULT_DB_ALIAS) -> ModuleType:
        try:
            return chosen[alias]
        except KeyError:
            return chosen.setdefault(alias, pg if usable(alias) else orm)

    return path


@contextlib.contextmanager
def cursor() -> Iterator[Any]:
    """Django's cursor for one of the fast paths' statements, prepared on the server when the
    project allows prepared statements.

    Planning a statement of several CTEs costs PostgreSQL more than running it (measured
    with pgbench: a protected request's statements run 1.8x as fast prepared). Django binds
    parameters on the client (psycopg's ClientCursor, which never prepares) and turns
    prepared statements off unless OPTIONS sets `prepare_threshold` (PgBouncer in
    transaction mode before 1.21 cannot route them). Where it is set, these few statements
    are prepared once per connection on a server-binding psycopg cursor in Django's own
    wrapper, which keeps Django's health check, error translation and query
    logging; the ORM's own queries are unaffected. Only on persistent connections
    (CONN_MAX_AGE not 0): preparing costs a round trip of its own, which a connection
    opened for one request would pay every time.
    """
    with _open(connections[DEFAULT_DB_ALIAS]) as wrapper:
        yield wrapper


@async_unsafe
def _open(db: Any) -> Any:
    """What `db.cursor()` does (BaseDatabaseWrapper._cursor: the health check, the connection,
    error translation, the wrapper that logs queries), with the prepared cursor created in
    place of Django's: creating Django's only to close it cost more than the statement's
    own Python (tests/core/test_dependency_guards.py pins these internals)."""
    db.close_if_health_check_failed()
    db.ensure_connection()
    if db.settings_dict["CONN_MAX_AGE"] == 0 or db.connection.prepare_threshold is None:
        return db.cursor()
    with db.wrap_database_errors:
        wrapper = db._prepare_cursor(_prepared_cursor_class()(db.connection))
    wrapper.cursor.logged = db.queries_logged
    return wrapper


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


def insert_unless_exists(
    model: type, fields: list, conflict: str, returned: str, expressions: dict[str, str] | None = None
) -> str:
    """An INSERT of one row of `fields` (one %s each, or the expression `expressions` gives
    for a field's name) that does nothing when the unique `conflict` columns already exist,
    for a CTE."""
    q = connection.ops.quote_name
    columns = ", ".join(q(f.column) for f in fields)
    placeholders = ", ".join((expressions or {}).get(f.name, "%s") for f in fields)
    return (
        f"INSERT INTO {q(model._meta.db_table)} ({columns}) VALUES ({placeholders}) "
        f"ON CONFLICT ({conflict}) DO NOTHING RETURNING {returned}"
    )
