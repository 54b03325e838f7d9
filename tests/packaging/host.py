"""A throwaway host project built from the marked code blocks of the docs, in a virtual
environment of its own, served by a real `runserver` on 127.0.0.1: what
test_core_install.py (the core, from a checkout) and test_wheel.py (the dashboard, from the
built wheel) share."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import sqlite3
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.qcluster import signal_group
from tests.waits import until

REPO = Path(__file__).resolve().parents[2]
# The placeholder the docs' shell blocks use for a checkout of idemdash.
CHECKOUT = "/path/to/idemdash"


def marked_blocks(page: str, prefix: str) -> dict[str, tuple[str, str]]:
    """{name: (language, code)} of the blocks of docs/`page` marked `<!-- prefix:name -->`."""
    text = (REPO / "docs" / page).read_text()
    found = re.findall(rf"<!-- {prefix}:(\w+) -->\n```(\w+)\n(.*?)```", text, re.S)
    return {name: (language, code) for name, language, code in found}


GUIDE = marked_blocks("host-project.md", "guide")
INSTALL = marked_blocks("install.md", "install")


def run(*args: str | Path, cwd: Path | None = None, env: dict | None = None, timeout: float = 120) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def run_block(block: tuple[str, str], venv: Path, checkout: Path, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 300) -> str:
    """A shell block of the docs, as written, in `venv` (first on PATH, as when it is
    activated), with the checkout's placeholder path replaced by `checkout`; in `env`, else
    this environment less the tests' own Django settings."""
    language, code = block
    assert language == "sh"
    base = env if env is not None else {k: v for k, v in os.environ.items()
                                        if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    env = {**base, "PATH": f"{venv / 'bin'}{os.pathsep}{base['PATH']}", "VIRTUAL_ENV": str(venv)}
    return run("bash", "-euo", "pipefail", "-c", code.replace(CHECKOUT, str(checkout)), cwd=cwd, env=env,
               timeout=timeout)


def new_venv(path: Path) -> Path:
    """A fresh virtual environment on the Python running the tests."""
    run(sys.executable, "-m", "venv", path)
    return path


def host_settings(database: str, *blocks: str) -> str:
    base = textwrap.dedent(
        f"""\
        SECRET_KEY = "host-project-test-key"
        DEBUG = False
        ALLOWED_HOSTS = ["127.0.0.1"]
        ROOT_URLCONF = "host.urls"
        USE_TZ = True
        INSTALLED_APPS = []
        MIDDLEWARE = []
        # As `startproject` writes them.
        TEMPLATES = [{{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "APP_DIRS": True,
                      "OPTIONS": {{"context_processors": []}}}}]
        STATIC_URL = "static/"
        {database}
        """
    )
    return base + "".join(f"\n# --- from the guide (docs/host-project.md): {name} ---\n" + GUIDE[name][1]
                          for name in ("settings", *blocks))


# The host's own code the guide's view calls: it records each execution in a file (the
# server's process writes it, the test reads it) and, given a `hold` path, runs until the
# test creates that file (at most a minute).
HOST_CODE = '''\
import os
import time


def capture_payment(payload):
    with open(os.environ["HOST_EXECUTIONS"], "a") as log:
        log.write(payload["order"] + "\\n")
    for _ in range(600 if payload.get("hold") else 0):
        if os.path.exists(payload["hold"]):
            break
        time.sleep(0.1)
    return {"order": payload["order"], "amount": payload["amount"]}

'''


def make_host(root: Path, database: str, *, dashboard: bool = False) -> Path:
    """The throwaway project: manage.py, settings (base + the guide's blocks), the guide's
    view and URLs; with `dashboard`, the blocks that mount the dashboard too."""
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
    settings = host_settings(database, *(("dashboard_settings",) if dashboard else ()))
    if dashboard:
        settings += f"\nSTATIC_ROOT = {str(root / 'collected')!r}\n"
    for name in ("settings", "view", "urls", *(("dashboard_settings", "dashboard_urls", "dashboard_login") if dashboard else ())):
        assert GUIDE[name][0] == "python", name
    (project / "host" / "settings.py").write_text(settings)
    (project / "host" / "views.py").write_text(HOST_CODE + GUIDE["view"][1])
    (project / "host" / "urls.py").write_text(
        "from django.urls import path\n\nfrom host import views\n\n"
        'urlpatterns = [path("payments/capture", views.capture)]\n\n' + GUIDE["urls"][1]
        + ("\n" + GUIDE["dashboard_urls"][1] + "\n" + GUIDE["dashboard_login"][1] if dashboard else "")
    )
    return project


def fresh_key_retry(answer: httpx.Response, first_key: str) -> dict:
    """`answer`'s problem, asserted to be the 409 fresh-key-retry that names `first_key`."""
    assert answer.status_code == 409, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert (problem["type"], problem["first_key"]) == ("urn:idemdash:problem:fresh-key-retry", first_key), problem
    return problem


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

    def serve(self, *options: str) -> tuple[subprocess.Popen, httpx.Client]:
        """`runserver` on a free port, once it answers; the caller stops both."""
        port = free_port()
        server = subprocess.Popen(
            [str(self.venv / "bin" / "python"), "manage.py", "runserver", "--noreload", *options,
             f"127.0.0.1:{port}"],
            cwd=self.project, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

        def answers() -> bool:
            if server.poll() is not None:
                client.close()
                raise AssertionError(server.stderr.read().decode())
            try:
                client.get("/payments/capture")
                return True
            except httpx.TransportError:
                return False

        try:
            until(answers, "the host's server to start", within=60, every=0.2)
        except AssertionError:
            if server.poll() is None:
                stop(server, client)
            raise
        return server, client


@contextmanager
def serving(command: list[str], port: int, cwd: Path, env: dict[str, str], log: Path, probe: str) -> Iterator[str]:
    """`command`, a server on 127.0.0.1:`port` in a process group of its own (its workers with
    it) writing to `log`, once `probe` (a path) answers at all; yields its base URL, then stops
    the group."""
    with open(log, "wb") as out:
        server = subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        def answers() -> bool:
            assert server.poll() is None, log.read_text()
            try:
                return httpx.get(base + probe, timeout=2).status_code > 0
            except httpx.TransportError:
                return False

        until(answers, f"{Path(command[0]).name} to answer", within=60, every=0.2, log=log)
        yield base
    finally:
        signal_group(server, signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            signal_group(server, signal.SIGKILL)
            server.wait()


def host_env(tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "HOST_EXECUTIONS": str(tmp_path / "executions.log"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def stop(server: subprocess.Popen, client: httpx.Client) -> None:
    client.close()
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@dataclass
class Database:
    django: dict  # the shop's DATABASES["default"]
    url: str  # the same database, for idemdash's own settings (DATABASE_URL)

    def tables(self) -> set[str]:
        if self.django["ENGINE"].endswith("sqlite3"):
            with sqlite3.connect(self.django["NAME"]) as db:
                return {row[0] for row in db.execute("select name from sqlite_master where type = 'table'")}
        import psycopg

        with psycopg.connect(self.url) as db:
            return {row[0] for row in db.execute("select tablename from pg_tables where schemaname = 'public'")}
