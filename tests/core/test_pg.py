"""idemdash/core/pg.py: which path a database gets, and that it is chosen once. The prepared
cursor is tested through the statements that use it (tests/receipts/test_pg.py) and pinned
in test_dependency_guards.py; a host on psycopg2 is tested in tests/packaging."""

from __future__ import annotations

from types import ModuleType

from django.db import DEFAULT_DB_ALIAS, connection

from idemdash.core import pg
from receipts import store
from webhooks import receive

PG, ORM = ModuleType("the statements"), ModuleType("their twin")


def test_postgresql_through_psycopg_3_is_usable_and_nothing_else():
    assert pg.usable() == (connection.vendor == "postgresql")
    assert pg.usable(DEFAULT_DB_ALIAS) == pg.usable()


def test_each_app_gets_its_statements_on_postgresql_and_their_twins_elsewhere():
    on_postgresql = connection.vendor == "postgresql"
    assert store.path().__name__ == ("receipts.pg" if on_postgresql else "receipts.orm")
    assert receive.path().__name__ == ("webhooks.pg" if on_postgresql else "webhooks.orm")


def test_the_choice_is_made_once_per_database(monkeypatch):
    choose = pg.choose(PG, ORM)
    monkeypatch.setattr(pg, "usable", lambda alias=DEFAULT_DB_ALIAS: True)
    assert choose() is PG
    monkeypatch.setattr(pg, "usable", lambda alias=DEFAULT_DB_ALIAS: False)
    assert choose() is PG and choose(DEFAULT_DB_ALIAS) is PG  # decided the first time
    assert choose("other") is ORM  # another database is asked about on its own
