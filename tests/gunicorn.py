"""Run the project under a real gunicorn against the test database, for what only a real
server does: taking the chunking off a request body, joining a repeated header. Both
databases: the subprocess reaches the test database by URL (on SQLite, its file)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from tests.qcluster import ROOT, database_url, free_port, signal_group, subprocess_env
from tests.waits import until


class Gunicorn:
    """Gunicorn's workers (one sync worker unless told) in its own session (process group),
    so that stopping it stops the workers too. `url` is its base URL on 127.0.0.1; `env`
    adds to the environment. `answered_by()` lists, per request, the pid of the worker that
    answered it and the status."""

    def __init__(self, log_path: Path, settings_module: str, workers: int = 1, *, worker_class: str = "sync",
                 threads: int = 1, **env: str) -> None:
        port = free_port()
        self._start(log_path, settings_module, port, env, [
            "gunicorn", "idemdash.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", str(workers), "--worker-class", worker_class, "--threads", str(threads), "--timeout", "30",
            "--graceful-timeout", "2",
            "--log-level", "warning",
            "--access-logfile", str(log_path.with_suffix(".access")), "--access-logformat", "%(p)s %(s)s",
        ])

    def _start(self, log_path: Path, settings_module: str, port: int, env: dict[str, str], module_argv: list[str]) -> None:
        """Run `python -m <module_argv>` on `port` against the test database, and wait until it answers."""
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        env = subprocess_env(
            DATABASE_URL=database_url(), DJANGO_SETTINGS_MODULE=settings_module, PYTHONUNBUFFERED="1", **env
        )
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *module_argv], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        def answers() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{type(self).__name__} exited at start:\n{self.log()}")
            try:
                httpx.get(self.url + "/admin/login/", timeout=2)
                return True
            except httpx.HTTPError:
                return False

        try:
            until(answers, f"{type(self).__name__} to answer", within=60, every=0.1, log=self.log_path)
        except AssertionError:
            self.stop()
            raise

    def answered_by(self) -> list[tuple[str, int]]:
        lines = self.log_path.with_suffix(".access").read_text().split("\n")
        return [(pid, int(status)) for pid, status in (line.split() for line in lines if line.strip())]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            signal_group(self.proc, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                signal_group(self.proc, signal.SIGKILL)
                self.proc.wait(5)
