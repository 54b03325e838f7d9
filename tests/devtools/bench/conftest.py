"""The bench's tools run against a PostgreSQL database of their own beside the suite's: made
afresh for each test, so that nothing a former run (or a former schema) left there is read."""

from __future__ import annotations

import os
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from django.conf import settings
from psycopg import sql


@pytest.fixture
def database_of_its_own() -> Callable[[str], str]:
    """`make(name)`: the URL of an empty database `<name>_<xdist worker>` on the suite's server."""

    def make(name: str) -> str:
        suffix = settings.TEST_DB_SUFFIX
        name = f"{name}_{suffix}" if suffix else name
        url = urlsplit(os.environ["DATABASE_URL"])
        maintenance = urlunsplit(url._replace(scheme="postgresql", path="/postgres"))
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return urlunsplit(url._replace(path=f"/{name}"))

    return make
