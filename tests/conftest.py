from __future__ import annotations

import _posixsubprocess
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client


def _quick_flush() -> None:
    """A transactional test's flush, made cheap (on CI's loaded machine it cost above a second
    a test on PostgreSQL):
    - the content types and permissions are kept: the models make them, so post_migrate's
      create_contenttypes and create_permissions would make the same rows again; our apps'
      handlers (groups, schedules, endpoints) still run after every flush;
    - on PostgreSQL a DELETE from each table (foreign keys are deferred to the commit), as
      Django does on MySQL, instead of a TRUNCATE, which makes new files for every table.
    A flush that resets sequences still truncates."""
    from django.contrib.auth.management import create_permissions
    from django.contrib.contenttypes.management import create_contenttypes
    from django.core.management import sql
    from django.core.management.commands import flush
    from django.db.backends.postgresql.operations import DatabaseOperations
    from django.db.models.signals import post_migrate

    kept = {"django_content_type", "auth_permission"}

    def sql_flush(style, connection, reset_sequences=True, allow_cascade=False):
        tables = [t for t in connection.introspection.django_table_names(only_existing=True, include_views=False) if t not in kept]
        return connection.ops.sql_flush(style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)

    auth_uid = "django.contrib.auth.management.create_permissions"

    def emit_post_migrate_signal(verbosity, interactive, db, **kwargs):
        post_migrate.disconnect(create_contenttypes)
        post_migrate.disconnect(dispatch_uid=auth_uid)
        try:
            sql.emit_post_migrate_signal(verbosity, interactive, db, **kwargs)
        finally:
            post_migrate.connect(create_contenttypes)
            post_migrate.connect(create_permissions, dispatch_uid=auth_uid)

    flush.sql_flush, flush.emit_post_migrate_signal = sql_flush, emit_post_migrate_signal
    truncate = DatabaseOperations.sql_flush

    def postgresql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return ["SET CONSTRAINTS ALL DEFERRED;", *(f"DELETE FROM {self.quote_name(table)};" for table in tables)]

    DatabaseOperations.sql_flush = postgresql_flush


_quick_flush()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database-tests-only", action="store_true",
        help="deselect the tests that use no database: .ci/run's stages on a second database "
             "(they ran on SQLite already, on the same Python and Django)",
    )


# pytest-django's fixtures that give a test the database (every test sets the test database
# up: receipts/pytest_plugin.py closes the LISTEN connection before it is dropped).
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server"}


def uses_a_database(item: pytest.Item) -> bool:
    return item.get_closest_marker("django_db") is not None or bool(DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`postgres` tests run only on PostgreSQL. Under .ci/run's PostgreSQL pass
    (IDEMDASH_REQUIRE_POSTGRES=1) a database that is not PostgreSQL is an error, not a skip."""
    from django.conf import settings

    if config.getoption("--database-tests-only"):
        kept = [item for item in items if uses_a_database(item)]
        config.hook.pytest_deselected(items=[item for item in items if not uses_a_database(item)])
        items[:] = kept

    on_postgres = settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
    if os.environ.get("IDEMDASH_REQUIRE_POSTGRES") == "1" and not on_postgres:
        raise pytest.UsageError("IDEMDASH_REQUIRE_POSTGRES=1 but DATABASE_URL is not PostgreSQL")
    if os.environ.get("IDEMDASH_REQUIRE_MYSQL") == "1" and not settings.DATABASES["default"]["ENGINE"].endswith("mysql"):
        raise pytest.UsageError("IDEMDASH_REQUIRE_MYSQL=1 but DATABASE_URL is not MySQL/MariaDB")
    if on_postgres:
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL: set DATABASE_URL=postgres://...")
    for item in items:
        if "postgres" in item.keywords:
            item.add_marker(skip)


# --- the two tiers (docs/development.md) ---------------------------------------------------------
# A test marked `slow` may start OS processes, servers, browsers and packaging venvs, and wait on
# them; every other test is in the fast tier (`make test`), which this guard holds to its
# promise: it starts no process and its own code never sleeps. Either is an error naming the
# test, not a slow pass.
TESTS = Path(__file__).resolve().parent
WAITS = str(TESTS / "waits.py")  # the one poll a fast test may make: a condition with a deadline


class SlowTierOnly(Exception):
    """A fast-tier test did what only the slow tier may."""


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise SlowTierOnly(f"{what} in a fast test: mark it @pytest.mark.slow, or test it without ({TESTS / 'conftest.py'})")
    return refused


def _sleep_outside_tests(real_sleep):
    def sleep(seconds: float) -> None:
        caller = sys._getframe(1).f_code.co_filename
        if seconds > 0 and caller.startswith(str(TESTS)) and caller != WAITS:
            raise SlowTierOnly(f"time.sleep({seconds}) in a fast test: wait on an event, or hold the clock")
        real_sleep(seconds)
    return sleep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if item.get_closest_marker("slow"):
        return (yield)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_posixsubprocess, "fork_exec", _refuse("starting a process"))
        mp.setattr(subprocess, "_fork_exec", _refuse("starting a process"))
        mp.setattr(subprocess, "_USE_POSIX_SPAWN", False)
        mp.setattr(os, "fork", _refuse("forking"))
        mp.setattr(time, "sleep", _sleep_outside_tests(time.sleep))
        return (yield)


@pytest.fixture(scope="session", autouse=True)
def _close_listener(_receipts_listener_closed):
    """The receipts LISTEN connection must be closed before the test database is dropped:
    the package's pytest plugin (receipts/pytest_plugin.py) does it, for every session here."""


@pytest.fixture(autouse=True)
def _no_dropped_connection() -> None:
    """Start each test on a usable connection. This process keeps its connection from one
    test to the next, and a test may have ended it: the fault tests terminate backends of the
    test database, and until tests/qcluster.py:signal_group a late killpg of a reaped
    process's pid could reach it (CI's AdminShutdown failures of browser tests). Django checks
    a persistent connection at a request's start (CONN_HEALTH_CHECKS); a test starts here."""
    if connection.connection is not None and not connection.is_usable():
        connection.close()


@pytest.fixture(autouse=True)
def _no_observed_notes() -> Iterator[None]:
    """What the observer of unprotected routes noted during a test (receipts/observe.py) is
    that test's: a later one's flush must not write it."""
    yield
    from receipts import observe

    with observe._lock:
        observe._pending.clear()


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


# Users of the dashboard's two permission levels, and one in no group.
def _member(django_user_model, username: str, group: str | None):
    user = django_user_model.objects.create_user(username, password="pw-" + username)
    if group:
        user.groups.add(Group.objects.get(name=group))
    return user


@pytest.fixture
def viewer(django_user_model):
    return _member(django_user_model, "vera", "viewers")


@pytest.fixture
def operator(django_user_model):
    return _member(django_user_model, "otto", "operators")


@pytest.fixture
def outsider(django_user_model):
    """Logged in, but in no group."""
    return _member(django_user_model, "nobody", None)


def _logged_in(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture
def viewer_client(viewer) -> Client:
    return _logged_in(viewer)


@pytest.fixture
def operator_client(operator) -> Client:
    return _logged_in(operator)


@pytest.fixture
def outsider_client(outsider) -> Client:
    return _logged_in(outsider)


@pytest.fixture
def outbox_may_post_locally(settings) -> None:
    """The outbox's fence refuses loopback unless it is listed: a test that drains to a
    receiver on 127.0.0.1 lists it, as `make demo` does."""
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
