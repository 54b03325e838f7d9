"""Run the project under a real uvicorn (ASGI, `idemdash.asgi:application`) against the test
database, for what only an ASGI server does: async views on an event loop, several worker
processes, a Prefer: wait that must not hold the loop. Started, awaited and stopped as
tests.gunicorn's server is."""

from __future__ import annotations

from pathlib import Path

from tests.gunicorn import Gunicorn
from tests.qcluster import free_port


class Uvicorn(Gunicorn):
    def __init__(self, log_path: Path, settings_module: str, workers: int = 1, **env: str) -> None:
        port = free_port()
        self._start(log_path, settings_module, port, env, [
            "uvicorn", "idemdash.asgi:application", "--host", "127.0.0.1", "--port", str(port),
            "--workers", str(workers), "--log-level", "warning", "--no-access-log", "--timeout-graceful-shutdown", "2",
        ])
