"""Run a real `manage.py qcluster` against the test database, for tests that need the
django-q2 worker as it runs in production (PostgreSQL only: the subprocess must reach the
test database by URL)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def database_url() -> str:
    s = connection.settings_dict
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


def subprocess_env(**overrides: str) -> dict[str, str]:
    """This environment without the developer's webhook secrets and Redis (a subprocess
    under test uses the database's broker and the test's own endpoints)."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.endswith("_WEBHOOK_SECRET") and k not in {"REDIS_URL", "IDEMDASH_TEST_DB_SUFFIX"}
    }
    env.update(overrides)
    return env


def start_qcluster(log_path: Path, **env_overrides: str) -> subprocess.Popen:
    """Start qcluster in its own session (process group), so that stop/kill reach its
    worker processes too. The developer's webhook secrets and Redis are left out."""
    env = subprocess_env(DATABASE_URL=database_url(), Q_WORKERS="1", PYTHONUNBUFFERED="1")
    env.update(env_overrides)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )


def kill_qcluster(worker: subprocess.Popen) -> None:
    """SIGKILL the whole process group at once: the cluster gets no chance to clean up."""
    try:
        os.killpg(worker.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    worker.wait(timeout=10)


def stop_qcluster(worker: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL the group if it has not stopped within 30 s."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    kill_qcluster(worker)  # also reaps workers that outlived their parent
