"""Run real server processes for tests: `manage.py qcluster` against the test database, for
tests that need the django-q2 worker as it runs in production (the subprocess reaches the
test database by URL: PostgreSQL's, or the SQLite test file's), or any command in its own
session."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from django.db import connection

from idemdash.devtools.bench.servers import process_table
from tests.waits import until

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def database_url(name: str | None = None) -> str:
    """The test database's URL, or that of database `name` on the same server."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = quote(s["USER"] or "", safe="")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"], safe="")
    if connection.vendor == "mysql":
        return f"mysql://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 3306}/{name or s['NAME']}"
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{name or s['NAME']}"


# What the backends of a test's subprocesses are called in pg_stat_activity (libpq reads
# PGAPPNAME), so that a test playing a failover terminates those, never a connection of the
# pytest process itself (its other threads' outlive the test, and a later test would fail on them).
CHILD_APPLICATION_NAME = "idemdash-test-child"


def subprocess_env(**overrides: str) -> dict[str, str]:
    """This environment without the developer's webhook secrets and Redis (a subprocess
    under test uses the database's broker and the test's own endpoints), its database
    connections named CHILD_APPLICATION_NAME."""
    env = {
        k: v for k, v in os.environ.items()
        if not k.endswith("_WEBHOOK_SECRET") and k not in {"REDIS_URL", "IDEMDASH_TEST_DB_SUFFIX"}
    }
    env["PGAPPNAME"] = CHILD_APPLICATION_NAME
    env.update(overrides)
    return env


def start_qcluster(log_path: Path, **env_overrides: str) -> subprocess.Popen:
    """Start qcluster in its own session (process group), so that stop/kill reach its
    worker processes too. The developer's webhook secrets and Redis are left out."""
    env = subprocess_env(DATABASE_URL=database_url(), Q_WORKERS="1", PYTHONUNBUFFERED="1")
    env.update(env_overrides)
    return start_process([sys.executable, "manage.py", "qcluster"], log_path, env)


TICK = "idemdash.worker.liveness.tick"


def processed(log_path: Path, func: str) -> int:
    """How many tasks running `func` (a dotted path) the cluster logging to `log_path` has
    finished, as its monitor logs each. With one worker (start_qcluster's default) they ran in
    the order logged: a tick logged after a task ran after it."""
    return log_path.read_text(errors="replace").count(f"Processed '{func}'")


def start_process(argv: list[str], log_path: Path, env: dict[str, str], cwd: Path = ROOT) -> subprocess.Popen:
    """Start `argv` in its own session (process group), so that stop/kill reach its
    children (a server's workers) too; its output is appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def group_members(worker: subprocess.Popen) -> list[int]:
    """The live processes of the group `worker` leads (started in a session of its own),
    its leader left out. The kernel frees a pid only once no process has it as its group id,
    so while a member is found the number is still ours, even after the leader was reaped;
    and a process that was given the number since leads a group of its own, as every
    PostgreSQL backend does (it calls setsid), and is left out with the leader."""
    return [pid for pid, state, _, pgrp in process_table() if pgrp == worker.pid and pid != worker.pid and state != "Z"]


def signal_group(worker: subprocess.Popen, sig: int) -> None:
    """Send `sig` to the process group of `worker`, while it is still ours: its leader not
    reaped yet (an exited one, a zombie, keeps its pid), or members left. A killpg after the
    leader was reaped and its group gone can reach a process that has its pid since: in CI a
    test's database connection was so terminated in the middle of a later test
    ("terminating connection due to administrator command": PostgreSQL backends lead groups
    of their own), and a SIGKILL there would have crashed the server."""
    if worker.returncode is None or group_members(worker):
        try:
            os.killpg(worker.pid, sig)
        except ProcessLookupError:
            pass


def kill_process(worker: subprocess.Popen) -> None:
    """SIGKILL the whole process group at once: the cluster gets no chance to clean up."""
    signal_group(worker, signal.SIGKILL)
    worker.wait(timeout=10)


def signal_stop(worker: subprocess.Popen, *, group: bool, within: float) -> float | None:
    """SIGTERM the main process only (systemd's KillMode=mixed) or every process of the
    cluster (KillMode=control-group); after `within` seconds, SIGKILL the rest, as systemd
    does at TimeoutStopSec. Returns how long the cluster took to stop, None if it had to
    be killed. Stopped means every process of its group is gone, not only the main one."""
    started = time.monotonic()
    if group:
        signal_group(worker, signal.SIGTERM)
    else:
        worker.send_signal(signal.SIGTERM)
    try:
        until(lambda: worker.poll() is not None and not group_alive(worker), "the cluster to stop", within=within,
              every=0.1)
    except AssertionError:
        kill_process(worker)
        return None
    return time.monotonic() - started


def group_alive(worker: subprocess.Popen) -> bool:
    """Whether any process of the group of `worker` is left, its leader included."""
    return worker.poll() is None or bool(group_members(worker))


def stop_process(worker: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL the group if it has not stopped within 30 s."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
    kill_process(worker)  # also reaps workers that outlived their parent
