"""receipts/apps.py: `migrate` on a database whose users are another model's stops before it
writes anything, naming the settings to set, instead of failing halfway on `auth_user`."""

from __future__ import annotations

import os
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def migrate(database: Path, *labels: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env.update(DATABASE_URL=f"sqlite:///{database}", SECRET_KEY=secrets.token_urlsafe(50),
               IDEMDASH_VAR_DIR=str(database.parent))
    return subprocess.run([sys.executable, "manage.py", "migrate", *labels, "--noinput"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def tables(database: Path) -> set[str]:
    with sqlite3.connect(database) as db:
        return {row[0] for row in db.execute("select name from sqlite_master where type = 'table'")}


def test_migrate_on_a_database_of_another_user_model_stops_before_writing_a_table(tmp_path):
    database = tmp_path / "host.sqlite3"
    # A host's database: auth migrated, its users in a table of its own, not auth_user.
    assert migrate(database, "auth").returncode == 0
    with sqlite3.connect(database) as db:
        db.executescript("drop table auth_user_groups; drop table auth_user_user_permissions; drop table auth_user; "
                         "create table accounts_user (id integer primary key, username text);")
    before = tables(database)

    done = migrate(database)

    assert done.returncode != 0
    assert "'auth_user' is not there" in done.stderr and "IDEMDASH_AUTH_USER_MODEL" in done.stderr
    assert "nothing was migrated" in done.stderr
    assert tables(database) == before


def test_migrate_on_a_fresh_database_is_not_refused(tmp_path):
    database = tmp_path / "fresh.sqlite3"
    done = migrate(database, "auth")
    assert done.returncode == 0, done.stderr
    assert "auth_user" in tables(database)
