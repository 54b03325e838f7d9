"""The Production section of docs/operations.md, done literally: the commands of its `sh`
blocks run in a fresh database with DEBUG off, a strong SECRET_KEY and no proxy (migrate,
collectstatic, check --deploy, gunicorn, qcluster), then Chromium logs in and looks at the
overview. The commands are read from that page, so the page and this test cannot drift apart.

Screenshots (1440x900) go to var/screenshots/production-*.png.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings

from tests.dashboard.test_browser import SHOTS, browser  # noqa: F401 (the fixture)
from tests.qcluster import signal_group
from tests.waits import until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
ROOT = Path(settings.BASE_DIR)
BIN = Path(sys.executable).parent
DOCUMENTED_PORT = "127.0.0.1:8000"
ADMIN_PASSWORD = "production-test-" + secrets.token_hex(8)


def production_commands() -> list[str]:
    """Every `python manage.py ...` and `gunicorn ...` line of the `sh` blocks in the Production
    section of docs/operations.md, continuation lines joined, in order."""
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page.split("\n## Production\n", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+", " ", line.split("#", 1)[0]).strip()
            if line.startswith(("python manage.py ", "gunicorn ")):
                commands.append(line)
    return commands


def test_the_production_page_names_the_steps_this_test_relies_on():
    commands = production_commands()
    assert commands[:3] == ["python manage.py migrate", "python manage.py install_schedules",
                            "python manage.py collectstatic --noinput"]
    assert any(c.startswith("gunicorn idemdash.wsgi:application") and DOCUMENTED_PORT in c for c in commands)
    assert "python manage.py qcluster" in commands


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def database_url(tmp_path):
    """A database of its own, empty: PostgreSQL when the suite runs on it, else a SQLite file."""
    default = settings.DATABASES["default"]
    if not default["ENGINE"].endswith("postgresql"):
        yield f"sqlite:///{tmp_path / 'production.sqlite3'}"
        return
    import psycopg

    name = f"idemdash_production_{settings.TEST_DB_SUFFIX or 'test'}"
    params = {"dbname": "postgres", "user": default["USER"], "password": default["PASSWORD"] or None,
              "host": default["HOST"] or "127.0.0.1", "port": default["PORT"] or 5432}
    params = {k: v for k, v in params.items() if v}
    with psycopg.connect(autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    auth = quote(default["USER"] or "", safe="") + (":" + quote(default["PASSWORD"], safe="") if default["PASSWORD"] else "")
    yield f"postgres://{auth}@{params['host']}:{params['port']}/{name}"
    with psycopg.connect(autocommit=True, **params) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def production_env(tmp_path, database_url) -> dict[str, str]:
    """The documented environment, for 127.0.0.1 over plain HTTP (so no Secure cookies)."""
    drop = {"DJANGO_SETTINGS_MODULE", "IDEMDASH_TEST_DB_SUFFIX", "REDIS_URL", "DEBUG", "DB_CONN_MAX_AGE",
            "DJANGO_ALLOW_ASYNC_UNSAFE"}  # set for Playwright in this process; check --deploy refuses it
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.endswith("_WEBHOOK_SECRET")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # `python` and `gunicorn` are this venv's
        DATABASE_URL=database_url, SECRET_KEY=secrets.token_urlsafe(50), DB_CONN_MAX_AGE="60",
        ALLOWED_HOSTS="127.0.0.1", IDEMDASH_VAR_DIR=str(tmp_path / "var"), Q_WORKERS="1",
        EMAIL_URL="memory:", PYTHONUNBUFFERED="1",
    )
    return env


def _wait_for(url: str, process: subprocess.Popen, log: Path, seconds: float = 60) -> None:
    def answers() -> bool:
        assert process.poll() is None, log.read_text()[-3000:]
        try:
            httpx.get(url, timeout=2)
            return True
        except httpx.TransportError:
            return False

    until(answers, f"{url} to answer", within=seconds, every=0.2, log=log)


def _stop(process: subprocess.Popen) -> None:
    try:
        signal_group(process, signal.SIGTERM)
        process.wait(20)
    except subprocess.TimeoutExpired:
        signal_group(process, signal.SIGKILL)
        process.wait(5)


@pytest.mark.slow
def test_the_documented_production_steps_serve_a_complete_dashboard_with_gunicorn_alone(
    production_env, browser, tmp_path  # noqa: F811
):
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []
    try:
        for command in production_commands():
            log = tmp_path / f"{command.split()[0] if command.startswith('gunicorn ') else command.split()[2]}.log"
            if command.startswith("gunicorn "):
                assert DOCUMENTED_PORT in command
                command = command.replace(DOCUMENTED_PORT, f"127.0.0.1:{port}")
            if command.startswith("gunicorn ") or command == "python manage.py qcluster":
                with open(log, "wb") as out:
                    started.append(subprocess.Popen(command, shell=True, cwd=ROOT, env=production_env, stdout=out,
                                                    stderr=subprocess.STDOUT, start_new_session=True))
                continue
            done = subprocess.run(command, shell=True, cwd=ROOT, env=production_env, capture_output=True,
                                  text=True, timeout=180)
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
            if "collectstatic" in command:
                assert (tmp_path / "var" / "static" / "staticfiles.json").exists()
        # The documented first-time step, without questions.
        done = subprocess.run(
            "python manage.py createsuperuser --noinput", shell=True, cwd=ROOT, capture_output=True, text=True,
            env={**production_env, "DJANGO_SUPERUSER_USERNAME": "admin", "DJANGO_SUPERUSER_EMAIL": "admin@localhost",
                 "DJANGO_SUPERUSER_PASSWORD": ADMIN_PASSWORD}, timeout=60,
        )
        assert done.returncode == 0, done.stderr
        web, worker = started
        _wait_for(base + "/accounts/login/", web, tmp_path / "gunicorn.log")

        page = browser.new_page(viewport={"width": 1440, "height": 900})
        static: dict[str, int] = {}
        page.on("response", lambda r: static.__setitem__(r.url, r.status) if "/static/" in r.url else None)
        page.goto(base + "/")
        assert page.url.startswith(base + "/accounts/login/")
        page.screenshot(path=str(SHOTS / "production-login.png"))
        page.fill("input[name=username]", "admin")
        page.fill("input[name=password]", ADMIN_PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")
        page.wait_for_selector(".chart-plot.js-plotly-plot svg.main-svg", timeout=30_000)
        charts = page.locator(".chart-plot").count()
        assert charts >= 2 and page.locator(".chart-plot.js-plotly-plot").count() == charts
        # idemdash.css applies: its accent colour and its sticky top bar.
        assert page.eval_on_selector(".brand-mark", "e => getComputedStyle(e).color") == "rgb(37, 99, 235)"
        assert page.eval_on_selector(".topbar", "e => getComputedStyle(e).position") == "sticky"
        page.screenshot(path=str(SHOTS / "production-overview.png"))
        page.locator(".charts").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / "production-overview-charts.png"))

        assert static and all(status == 200 for status in static.values()), static
        (plotly,) = [url for url in static if "/static/vendor/plotly.min." in url]
        assert re.search(r"/plotly\.min\.[0-9a-f]{12}\.js$", plotly)  # the hashed name
        served = httpx.get(plotly, headers={"Accept-Encoding": "gzip"})
        assert served.headers["Content-Encoding"] == "gzip"
        assert served.headers["Cache-Control"] == "max-age=315360000, public, immutable"

        page.goto(base + "/receipts/987654321/")
        assert page.locator("h1").inner_text() == "Not found"
        assert page.eval_on_selector(".topbar", "e => getComputedStyle(e).position") == "sticky"
        page.screenshot(path=str(SHOTS / "production-404.png"))
        hook = httpx.post(base + "/webhooks/a.b/", content=b"{}")
        assert hook.status_code == 404 and hook.headers["Content-Type"] == "application/problem+json"

        assert worker.poll() is None, (tmp_path / "qcluster.log").read_text()[-3000:]
    finally:
        for process in started:
            _stop(process)
    for log in tmp_path.glob("*.log"):
        assert "Traceback" not in log.read_text(), (log.name, log.read_text()[-3000:])
