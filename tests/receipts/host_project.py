"""A throwaway host project served by a real server, for the tests that drop idemdash into a
project written the way its community writes it (test_drf_host_project.py,
test_ninja_host_project.py): its files, its own database, migrated, and the server."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
from django.db import connection

from tests.qcluster import database_url, free_port, start_process, stop_process


WSGI = """
from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()
"""

# Three workers: concurrent callers meet in separate processes, each with its connection.
GUNICORN = [sys.executable, "-m", "gunicorn", "--workers", "3", "--bind", "127.0.0.1:{port}", "--timeout", "30",
            "--graceful-timeout", "3", "hostsite.wsgi"]


class HostDatabase:
    """The host project's own database: a sibling of the test database on PostgreSQL, a
    file in the project's directory on SQLite."""

    def __init__(self, root: Path) -> None:
        self.postgres = connection.vendor == "postgresql"
        if self.postgres:
            self.name = f"{connection.settings_dict['NAME']}_host"
            self.url = database_url(self.name)
        else:
            self.path = root / "host.sqlite3"
            self.url = f"sqlite:///{self.path}"

    def create(self) -> None:
        if self.postgres:
            self._maintenance(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)', f'CREATE DATABASE "{self.name}"')

    def drop(self) -> None:
        if self.postgres:
            self._maintenance(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def _maintenance(self, *statements: str) -> None:
        with psycopg.connect(database_url("postgres"), autocommit=True, connect_timeout=10) as conn:
            for statement in statements:
                conn.execute(statement)

    def rows(self, sql: str) -> list[tuple]:
        if self.postgres:
            with psycopg.connect(self.url, connect_timeout=10) as conn:
                return conn.execute(sql).fetchall()
        with sqlite3.connect(self.path, timeout=30) as conn:
            return conn.execute(sql).fetchall()


class HostProject:
    def __init__(self, root: Path, files: dict[str, str], settings_module: str) -> None:
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text.lstrip())
        self.root = root
        self.db = HostDatabase(root)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("IDEMDASH_", "DJANGO_"))}
        self.env.update(DATABASE_URL=self.db.url, DJANGO_SETTINGS_MODULE=settings_module, PYTHONPATH=str(root))

    def django(self, *args: str, check: bool = True, **env: str) -> subprocess.CompletedProcess:
        """`python -m django ...` in the project, with `env` added to its environment."""
        return subprocess.run(
            [sys.executable, "-m", "django", *args], cwd=self.root, env={**self.env, **env}, check=check,
            capture_output=True, text=True, timeout=120,
        )

    @contextlib.contextmanager
    def migrated_and_served(self, users: str, ready_path: str, server: list[str] = GUNICORN) -> Iterator[tuple[str, dict]]:
        """Its database made and migrated, `users` run in its shell (printing JSON last), and
        `server` serving it: (base URL, what `users` printed). The database is dropped after."""
        self.db.create()
        try:
            self.django("migrate", "--noinput")
            made = json.loads(self.django("shell", "-c", users).stdout.strip().splitlines()[-1])
            with self.served(server, ready_path) as base:
                yield base, made
        finally:
            self.db.drop()

    @contextlib.contextmanager
    def served(self, argv: list[str], ready_path: str) -> Iterator[str]:
        """The project migrated (by the caller) and served by `argv` (which ends with the
        address to bind, given as {port}) until it answers `ready_path`: its base URL."""
        port = free_port()
        log = self.root / "server.log"
        server = start_process([arg.format(port=port) for arg in argv], log, self.env, cwd=self.root)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if httpx.get(f"{base}{ready_path}", timeout=5).status_code < 500:
                        break
                except httpx.TransportError:
                    pass
                assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            yield base
        finally:
            stop_process(server)
