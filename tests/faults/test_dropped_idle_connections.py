"""PostgreSQL drops the idle connections of a live gunicorn server (a failover, a restart,
an idle timeout; here `pg_terminate_backend`) while it keeps persistent connections
(DB_CONN_MAX_AGE): the settings health-check a kept connection before its next request
uses it, so no request fails but those in flight at the kill."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from django.db import connection

from idemdash.core.clients import create_token
from tests.qcluster import CHILD_APPLICATION_NAME, database_url, free_port, start_process, stop_process, subprocess_env
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.timeout(120)]
WORKERS, THREADS, CALLERS = 3, 4, 8


def _start_gunicorn(port: int, log: Path) -> subprocess.Popen:
    env = subprocess_env(DATABASE_URL=database_url(), DB_CONN_MAX_AGE="60", LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return start_process(
        [sys.executable, "-m", "gunicorn", "idemdash.wsgi:application", "--bind", f"127.0.0.1:{port}",
         "--workers", str(WORKERS), "--worker-class", "gthread", "--threads", str(THREADS)],
        log, env,
    )


def _kill_idle_backends() -> tuple[float, float, int]:
    """Terminate every idle backend of the test's gunicorn (CHILD_APPLICATION_NAME: not the
    pytest process's own). pg_terminate_backend only signals: the kill lasts until the
    backends are gone, so that is when it ends."""
    started = time.monotonic()
    with connection.cursor() as cursor:
        # Two statements: in one, nothing says the filter runs before pg_terminate_backend.
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = %s AND state = 'idle'", [CHILD_APPLICATION_NAME])
        idle = [pid for (pid,) in cursor.fetchall()]
        cursor.execute("SELECT pid FROM unnest(%s::int[]) AS pid WHERE pg_terminate_backend(pid)", [idle])
        killed = [pid for (pid,) in cursor.fetchall()]

        def gone() -> bool:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [killed])
            return cursor.fetchone()[0] == 0

        until(gone, "the terminated backends to be gone", every=0.005)
        return started, time.monotonic(), len(killed)


@pytest.mark.django_db(transaction=True)
def test_killing_the_idle_connections_of_a_live_server_fails_no_request_that_starts_after(tmp_path):
    _, token = create_token("dropped-idle")
    port = free_port()
    log = tmp_path / "gunicorn.log"
    server = _start_gunicorn(port, log)
    results: list[tuple[float, float, int]] = []  # (started, ended, status)
    stop = threading.Event()

    def caller(n: int) -> None:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            for i in range(10_000):
                if stop.is_set():
                    return
                started = time.monotonic()
                try:
                    status = http.post("/api/v1/receipts/claim", json={"key": f"c{n}-{i}", "operation": "demo.op"}).status_code
                except httpx.TransportError:
                    if server.poll() is not None or started < ready_at:
                        raise
                    status = 0
                results.append((started, time.monotonic(), status))

    try:
        def answers() -> bool:
            assert server.poll() is None, log.read_text()
            try:
                return httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).status_code > 0
            except httpx.TransportError:
                return False

        until(answers, "gunicorn to answer", log=log)
        ready_at = time.monotonic()
        callers = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
        for thread in callers:
            thread.start()
        kills = []
        for _ in range(3):  # three times, so that connections opened after a kill are killed too
            # Requests served since the last kill (or the start), so that worker threads keep
            # connections again; then a kill that finds one idle between two requests.
            since = kills[-1][1] if kills else ready_at
            until(lambda: sum(1 for r in results if r[0] > since) >= 50, "requests on kept connections", log=log)
            kills.append(until(lambda: (kill := _kill_idle_backends())[2] > 0 and kill,
                               "a kept connection idle between two requests", log=log))
        until(lambda: sum(1 for r in results if r[0] > kills[-1][1]) >= 50, "requests after the last kill", log=log)
        stop.set()
        for thread in callers:
            thread.join(30)
    finally:
        stop.set()
        stop_process(server)

    assert sum(killed for _, _, killed in kills) >= WORKERS, kills  # persistent connections were there to kill
    in_flight = [r for r in results if any(r[0] <= ended and r[1] >= started for started, ended, _ in kills)]
    after = [r for r in results if r not in in_flight]
    assert len(after) > 100 and all(status == 201 for _, _, status in after), (
        [r for r in after if r[2] != 201][:10], (tmp_path / "gunicorn.log").read_text()[-3000:]
    )
    # At most the request that was using a killed connection fails, once per connection.
    assert len([r for r in in_flight if r[2] != 201]) <= sum(killed for _, _, killed in kills)
