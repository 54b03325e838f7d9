"""The sdist and wheel, built once for every packaging test that installs them; a database of
the host project's own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import dj_database_url

import pytest

from tests.packaging.host import INSTALL, Database, new_venv, run_block
from tests.packaging.source import copy_source
from tests.qcluster import database_url


@pytest.fixture(scope="session")
def checkout(tmp_path_factory) -> Path:
    """A copy of the checkout, with dist/ built in it by docs/install.md's build block, run
    in a fresh virtual environment."""
    root = tmp_path_factory.mktemp("wheel")
    source = copy_source(root)
    run_block(INSTALL["build"], new_venv(root / "build-venv"), checkout=source, cwd=root)
    return source


@pytest.fixture(scope="session")
def wheel(checkout) -> Path:
    (built,) = (checkout / "dist").glob("idemdash-*.whl")
    return built


@pytest.fixture(scope="session")
def client_wheel(checkout) -> Path:
    """The wheel of the Python client's own distribution (clients/python), built beside."""
    (built,) = (checkout / "dist").glob("idemdash_client-*.whl")
    return built


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, tmp_path) -> Iterator[Database]:
    """A database of the host project's own: a SQLite file, or a PostgreSQL database made
    for it on the server of DATABASE_URL."""
    if request.param == "sqlite":
        path = tmp_path / "shop.sqlite3"
        yield Database({"ENGINE": "django.db.backends.sqlite3", "NAME": str(path),
                        "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20}}, f"sqlite:///{path}")
        return
    if not database_url().startswith("postgres"):
        if os.environ.get("IDEMDASH_REQUIRE_POSTGRES") == "1":
            pytest.fail("needs PostgreSQL: DATABASE_URL is not postgres://")
        pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://...")
    import psycopg

    name = f"shop_{os.environ.get('IDEMDASH_TEST_DB_SUFFIX', 'host')}"
    url = database_url(name)

    def recreate(create: bool) -> None:
        with psycopg.connect(database_url("postgres"), autocommit=True) as db:
            db.execute(f'drop database if exists "{name}" with (force)')
            if create:
                db.execute(f'create database "{name}"')

    recreate(True)
    try:
        yield Database(dj_database_url.parse(url), url)
    finally:
        recreate(False)
