"""The core (no extras) installed from a checkout in a fresh virtual environment, and a
throwaway host project built by following the guide in docs/host-project.md ("Add idemdash
to an existing Django or DRF project") step by step: its marked code blocks are read from that
page and used as they are, so the guide cannot drift from what works.

The host project is served by a real server process (`runserver --noreload`: gunicorn is
not core) on 127.0.0.1 and driven over HTTP. SQLite always; with DATABASE_URL on
PostgreSQL, also a host on psycopg2 (the portable ORM path) against PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings

from tests.packaging.host import GUIDE, Host, host_env, make_host, marked_blocks, new_venv, run, run_block, stop
from tests.packaging.source import copy_source
from tests.waits import until

INSTALL = marked_blocks("install.md", "install")

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(240)]

# What a core install must not pull in (each is an extra).
EXTRAS_ONLY = {"django-q2", "stripe", "plotly", "honcho", "gunicorn", "psycopg", "psycopg-binary", "django-htmx",
               "dj-database-url", "tqdm", "standardwebhooks", "redis", "opentelemetry-api", "opentelemetry-sdk"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtual environment with the core installed from a checkout, as the guide's first
    step says (the same command as docs/install.md's)."""
    assert GUIDE["install"] == INSTALL["checkout"]
    root = tmp_path_factory.mktemp("core")
    source = copy_source(root)
    env_dir = new_venv(root / "venv")
    run_block(GUIDE["install"], env_dir, checkout=source, cwd=root, timeout=180)
    return env_dir


def installed(venv: Path) -> set[str]:
    listing = json.loads(run(venv / "bin" / "pip", "list", "--format", "json"))
    return {p["name"].lower() for p in listing}


def test_the_core_install_pulls_in_no_extra(venv):
    packages = installed(venv)
    assert {"django", "rfc8785", "httpx", "idemdash", "idemdash-client"} <= packages
    assert not packages & EXTRAS_ONLY


@pytest.fixture
def make_server(venv, tmp_path) -> Iterator:
    served: list[tuple[subprocess.Popen, httpx.Client]] = []

    def start(database: str) -> tuple[Host, httpx.Client]:
        host = Host(venv, make_host(tmp_path, database), host_env(tmp_path))
        host.migrate()
        served.append(host.serve())
        return host, served[-1][1]

    yield start
    for server, client in served:
        stop(server, client)


def capture(client: httpx.Client, key: str, **payload) -> httpx.Response:
    body = {"order": key, "amount": 100, **payload}
    return client.post("/payments/capture", json=body, headers={"Idempotency-Key": key})


def problem_type(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/problem+json"
    return response.json()["type"].rsplit(":", 1)[1]


def check_the_contract(host: Host, client: httpx.Client) -> None:
    """Claim runs the view once; a repeat replays; an in-flight key is 409; a changed body
    with the same key is 422."""
    first = capture(client, "order-1")
    assert first.status_code == 201 and first.json() == {"payment": {"order": "order-1", "amount": 100}}
    assert host.executed == ["order-1"]

    again = capture(client, "order-1")
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert host.executed == ["order-1"]

    changed = capture(client, "order-1", amount=999)
    assert changed.status_code == 422 and problem_type(changed) == "idempotency-key-reused"

    slow: list[httpx.Response] = []
    release = host.project / "release-order-2"  # the first attempt runs until this exists
    worker = threading.Thread(target=lambda: slow.append(capture(client, "order-2", hold=str(release))))
    worker.start()
    until(lambda: "order-2" in host.executed, "the first attempt to run")  # it holds the lease
    in_flight = capture(client, "order-2", hold=str(release))
    assert in_flight.status_code == 409 and problem_type(in_flight) == "request-in-progress"
    assert int(in_flight.headers["retry-after"]) >= 1
    release.touch()
    worker.join(timeout=30)
    assert slow[0].status_code == 201
    assert host.executed == ["order-1", "order-2"]

    # The policy the receipt got: payments.* is financial by default (7 days).
    receipt = host.manage("shell", "--no-imports", "-c", (
        "from receipts.models import Receipt; r = Receipt.objects.get(key='order-1'); "
        "print((r.expires_at - r.created_at).days)"
    ))
    assert receipt.strip() == "7"


def test_a_host_project_on_sqlite_follows_the_guide(make_server, tmp_path):
    host, client = make_server(
        f'DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{tmp_path / "host.sqlite3"}"}}}}'
    )
    check_the_contract(host, client)
    # Importing the app and the store loaded no optional package, and of the idemdash
    # package only the shared core (its __init__ is empty): no dashboard, settings or tooling.
    loaded = host.manage("shell", "--no-imports", "-c", (
        "import sys, receipts.api, receipts.decorators, receipts.store, receipts.middleware; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'django_q', 'stripe', 'plotly', 'psycopg', 'psycopg2', 'django_htmx', 'tqdm', 'dj_database_url', 'webhooks'}), "
        "sorted(m for m in sys.modules if m.partition('.')[0] == 'idemdash' and m != 'idemdash' and not m.startswith('idemdash.core')))"
    ))
    assert loaded.strip() == "[] []"
    # The periodic work the guide names runs on the core alone (no tqdm, no django-q2).
    assert "receipts.expired: 0 due" in host.manage("purge", "--dry-run")
    host.manage("rollup")


@pytest.fixture
def postgres_database() -> Iterator[dict[str, str]]:
    """A database of its own on the PostgreSQL server of DATABASE_URL, for the host."""
    db = django_settings.DATABASES["default"]
    import psycopg

    name = f"idemdash_host_{os.environ.get('IDEMDASH_TEST_DB_SUFFIX', '') or 'test'}"
    server = {k: db[k] for k in ("USER", "PASSWORD", "HOST", "PORT")}
    connect = dict(dbname="postgres", user=server["USER"], password=server["PASSWORD"] or None,
                   host=server["HOST"], port=server["PORT"] or 5432, autocommit=True)
    with psycopg.connect(**connect) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    yield {"NAME": name, **server}
    with psycopg.connect(**connect) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_a_host_on_psycopg2_and_postgresql_gets_the_orm_path_with_the_same_guarantees(
    venv, make_server, postgres_database
):
    # The host's own driver choice, in its own environment.
    run(venv / "bin" / "pip", "install", "--quiet", "psycopg2-binary", timeout=180)
    database = {"ENGINE": "django.db.backends.postgresql", **postgres_database, "CONN_MAX_AGE": 60}
    host, client = make_server(f"DATABASES = {{'default': {database!r}}}")
    driver = host.manage("shell", "--no-imports", "-c", (
        "from django.db import connection; from idemdash.core import pg; from receipts import store; "
        "print(connection.vendor, connection.Database.__name__, pg.usable(), store.path().__name__)"
    ))
    assert driver.split() == ["postgresql", "psycopg2", "False", "receipts.orm"]
    check_the_contract(host, client)

    # Several threads per key at once: each key's view runs exactly once; the others get
    # 409 (in flight) or the replay, never a 500.
    # The attempts that run are held until every other caller has its answer.
    keys = [f"race-{n}" for n in range(4)]
    release = host.project / "release-races"
    answers: list[int] = []
    lock = threading.Lock()

    def hammer(key: str) -> None:
        status = capture(client, key, hold=str(release)).status_code
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=hammer, args=(key,)) for key in keys for _ in range(6)]
    for t in threads:
        t.start()
    until(lambda: len(answers) == 20, "an answer for every caller but the four held")
    release.touch()
    for t in threads:
        t.join(timeout=60)
    assert sorted(answers) == [201] * 4 + [409] * 20
    assert sorted(k for k in host.executed if k.startswith("race-")) == keys
