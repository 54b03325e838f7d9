"""The PostgreSQL database a bench run (or the soak) needs, and the processes it starts and
measures: gunicorn and django-q2's qcluster. Each process is started in its own session
(process group), so that stopping it stops its workers and nothing else."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings

# Sync workers, 2 x cores: Django views here are CPU-bound Python plus short queries, so a
# worker per request slot is what they want. Threads (gthread) would add GIL contention
# inside a worker, not throughput, on a 2-core machine, and one connection per worker keeps
# the database side equal for every variant. Sync workers close the connection after each
# response; on loopback a TCP connect costs tens of microseconds and every variant pays it.
GUNICORN_WORKERS = 4


def ensure_database(url: str) -> None:
    """Create the database if it is missing; fail clearly if PostgreSQL is not there."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        sys.exit(f"bench: needs PostgreSQL; DATABASE_URL is {parts.scheme}://…")
    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    try:
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                print(f"bench: created database {name}")
    except psycopg.OperationalError as exc:
        sys.exit(
            f"bench: PostgreSQL at {parts.hostname}:{parts.port or 5432} does not answer ({exc}).\n"
            "Start it (e.g. `pg_ctlcluster 15 main start`) or set DATABASE_URL=postgres://user@host:port/db."
        )


def start_django(default_url: str, settings_module: str = "idemdash.devtools.bench.settings") -> None:
    """Set Django up on DATABASE_URL (else `default_url`), created if missing, in this process
    and, through the environment, in the servers it starts. The settings refuse to start
    without a strong key: a run makes its own, which the servers inherit."""
    url = os.environ.get("DATABASE_URL") or default_url
    ensure_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    import django

    django.setup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BENCH_SETTINGS = "idemdash.devtools.bench.settings"


def server_env(settings_module: str = BENCH_SETTINGS) -> dict[str, str]:
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = settings_module
    env.setdefault("DB_CONN_MAX_AGE", "600")
    env["LOG_LEVEL"] = "WARNING"
    return env


class Process:
    def __init__(self, name: str, argv: list[str], log_path: Path, settings_module: str = BENCH_SETTINGS) -> None:
        self.name = name
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            argv, cwd=settings.BASE_DIR, env=server_env(settings_module), stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def children(self) -> list[int]:
        return descendants(self.proc.pid)

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            except ProcessLookupError:
                pass
        self.log.close()

    def tail(self, chars: int = 2000) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text(errors="replace")[-chars:]


def start_gunicorn(port: int, log_dir: Path, *, workers: int = GUNICORN_WORKERS, name: str = "gunicorn",
                   settings_module: str = BENCH_SETTINGS) -> Process:
    argv = [
        sys.executable, "-m", "gunicorn", "idemdash.wsgi:application",
        "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--worker-class", "sync",
        "--backlog", "2048", "--timeout", "120", "--graceful-timeout", "5", "--log-level", "warning",
        "--worker-tmp-dir", "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp",
    ]
    server = Process(name, argv, log_dir / f"{name}.log", settings_module)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"gunicorn exited at start:\n{server.tail()}")
        try:
            httpx.get(base + "/admin/login/", timeout=2)
            if len(server.children()) >= workers:
                return server
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"gunicorn did not answer on {base} within 60 s:\n{server.tail()}")


def start_qcluster(log_dir: Path, *, name: str = "qcluster", settings_module: str = BENCH_SETTINGS) -> Process:
    """django-q2's cluster: a sentinel with a monitor, a pusher and Q_CLUSTER["workers"]
    worker processes. Returns once they are all up."""
    cluster = Process(name, [sys.executable, "manage.py", "qcluster"], log_dir / f"{name}.log", settings_module)
    wanted = settings.Q_CLUSTER.get("workers", 1) + 3
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and cluster.alive():
        if len(cluster.children()) >= wanted:
            return cluster
        time.sleep(0.2)
    cluster.stop()
    raise RuntimeError(f"qcluster did not start its {wanted} processes within 60 s:\n{cluster.tail()}")


def process_table() -> list[tuple[int, str, int, int]]:
    """This machine's processes from /proc: (pid, state, parent pid, process group id)."""
    table = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # The command name may hold spaces; the fields after its ')' are fixed.
                state, ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
            table.append((int(entry), state, int(ppid), int(pgrp)))
        except (OSError, IndexError, ValueError):
            continue
    return table


def descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for child, _, ppid, _ in process_table():
        parents.setdefault(ppid, []).append(child)
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def peak_rss_mb(pid: int) -> float | None:
    """VmHWM: the most resident memory the process has had, in MiB."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU seconds a process has run so far: in nanoseconds from its schedstat (the
    scheduler's own count), else user + system time in clock ticks (10 ms) from its stat."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """cpu_seconds of each process (gone processes are left out)."""
    found = {}
    for pid in pids:
        try:
            found[pid] = cpu_seconds(pid)
        except (OSError, IndexError, ValueError):
            continue
    return found


def database_pids() -> list[int]:
    """PostgreSQL's processes working for this database: its backends (the web workers',
    the qcluster's), and the WAL writer, checkpointer and background writer they share.
    Backends of other databases on the same server are left out."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE (datname = current_database() AND pid <> pg_backend_pid())"
            " OR backend_type IN ('walwriter', 'checkpointer', 'background writer')"
        )
        return [pid for (pid,) in cursor.fetchall()]
