"""`pip install idemdash` (the core, no extras) in a fresh virtual environment, and a
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
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings as django_settings

from tests.packaging.source import copy_source

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
# What a core install must not pull in (each is an extra).
EXTRAS_ONLY = {"django-q2", "stripe", "plotly", "honcho", "gunicorn", "psycopg", "psycopg-binary", "django-htmx",
               "dj-database-url", "tqdm", "standardwebhooks", "redis"}


def guide_blocks() -> dict[str, tuple[str, str]]:
    """{name: (language, code)} of the guide's blocks marked `<!-- guide:name -->`."""
    guide = (REPO / "docs" / "host-project.md").read_text()
    found = re.findall(r"<!-- guide:(\w+) -->\n```(\w+)\n(.*?)```", guide, re.S)
    return {name: (language, code) for name, language, code in found}


GUIDE = guide_blocks()


def run(*args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A virtual environment with the core installed, as the guide's first step says."""
    language, command = GUIDE["install"]
    assert language == "sh" and command.strip() == "pip install idemdash"
    root = tmp_path_factory.mktemp("core")
    source = copy_source(root)
    env_dir = root / "venv"
    run(sys.executable, "-m", "venv", env_dir)
    run(env_dir / "bin" / "pip", "install", "--quiet", source, timeout=180)
    return env_dir


def installed(venv: Path) -> set[str]:
    listing = json.loads(run(venv / "bin" / "pip", "list", "--format", "json"))
    return {p["name"].lower() for p in listing}


def test_the_core_install_pulls_in_no_extra(venv):
    packages = installed(venv)
    assert {"django", "rfc8785", "httpx", "idemdash"} <= packages
    assert not packages & EXTRAS_ONLY


def host_settings(database: str) -> str:
    language, guide = GUIDE["settings"]
    assert language == "python"
    return textwrap.dedent(
        f"""\
        SECRET_KEY = "host-project-test-key"
        DEBUG = False
        ALLOWED_HOSTS = ["127.0.0.1"]
        ROOT_URLCONF = "host.urls"
        USE_TZ = True
        INSTALLED_APPS = []
        MIDDLEWARE = []
        {database}
        """
    ) + "\n# --- from the guide (docs/host-project.md) ---\n" + guide


# The host's own code the guide's view calls: it records each execution in a file (the
# server's process writes it, the test reads it) and can take its time.
HOST_CODE = '''\
import os
import time


def capture_payment(payload):
    with open(os.environ["HOST_EXECUTIONS"], "a") as log:
        log.write(payload["order"] + "\\n")
    time.sleep(payload.get("seconds", 0))
    return {"order": payload["order"], "amount": payload["amount"]}

'''


def make_host(root: Path, database: str) -> Path:
    """The throwaway project: manage.py, settings (base + the guide's block), the guide's
    view and URLs."""
    project = root / "hostproject"
    (project / "host").mkdir(parents=True)
    (project / "manage.py").write_text(textwrap.dedent("""\
        import os
        import sys

        from django.core.management import execute_from_command_line

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "host.settings")
        execute_from_command_line(sys.argv)
        """))
    (project / "host" / "__init__.py").write_text("")
    (project / "host" / "settings.py").write_text(host_settings(database))
    language, view = GUIDE["view"]
    assert language == "python"
    (project / "host" / "views.py").write_text(HOST_CODE + view)
    language, urls = GUIDE["urls"]
    assert language == "python"
    (project / "host" / "urls.py").write_text(
        "from django.urls import path\n\nfrom host import views\n\n"
        'urlpatterns = [path("payments/capture", views.capture)]\n\n' + urls
    )
    return project


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Host:
    def __init__(self, venv: Path, project: Path, env: dict[str, str]) -> None:
        self.venv, self.project, self.env = venv, project, env
        self.executions = Path(env["HOST_EXECUTIONS"])

    def manage(self, *args: str) -> str:
        return run(self.venv / "bin" / "python", "manage.py", *args, cwd=self.project, env=self.env)

    def migrate(self) -> str:
        language, command = GUIDE["migrate"]
        assert language == "sh" and command.strip() == "python manage.py migrate"
        return self.manage("migrate", "--noinput")

    @property
    def executed(self) -> list[str]:
        return self.executions.read_text().split() if self.executions.exists() else []


@pytest.fixture
def make_server(venv, tmp_path) -> Iterator:
    servers: list[subprocess.Popen] = []
    clients: list[httpx.Client] = []

    def start(database: str) -> tuple[Host, httpx.Client]:
        project = make_host(tmp_path, database)
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "HOST_EXECUTIONS": str(tmp_path / "executions.log"),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        host = Host(venv, project, env)
        host.migrate()
        port = free_port()
        server = subprocess.Popen(
            [str(venv / "bin" / "python"), "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            cwd=project, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        servers.append(server)
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
        clients.append(client)
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None, server.stderr.read().decode()
            try:
                client.get("/payments/capture")
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the host's server did not start"
                time.sleep(0.2)
        return host, client

    yield start
    for client in clients:
        client.close()
    for server in servers:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


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
    worker = threading.Thread(target=lambda: slow.append(capture(client, "order-2", seconds=2)))
    worker.start()
    deadline = time.monotonic() + 10
    while "order-2" not in host.executed:  # the first attempt holds the lease
        assert time.monotonic() < deadline
        time.sleep(0.05)
    in_flight = capture(client, "order-2", seconds=2)
    assert in_flight.status_code == 409 and problem_type(in_flight) == "request-in-progress"
    assert int(in_flight.headers["retry-after"]) >= 1
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
    keys = [f"race-{n}" for n in range(4)]
    answers: list[int] = []
    lock = threading.Lock()

    def hammer(key: str) -> None:
        status = capture(client, key, seconds=0.3).status_code
        with lock:
            answers.append(status)

    threads = [threading.Thread(target=hammer, args=(key,)) for key in keys for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(answers) == 24 and set(answers) <= {201, 409} and 201 in answers and 409 in answers
    assert sorted(k for k in host.executed if k.startswith("race-")) == keys
