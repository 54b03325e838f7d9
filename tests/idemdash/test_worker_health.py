"""`manage.py worker_health` and the overview's Workers section, against a real `manage.py
qcluster`: a cluster whose workers take work is healthy; once its workers stop taking work
(SIGSTOPped here: alive, their sentinel and scheduler still running, as in the wedge of issue
19) the command exits 1 and the overview says so, while a process check would see nothing wrong."""

from __future__ import annotations

import os
import re
import signal
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from idemdash.worker.models import ClusterHeartbeat
from tests.qcluster import kill_process, start_qcluster
from tests.waits import until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def health(*args: str) -> tuple[int, str]:
    from io import StringIO

    out, err = StringIO(), StringIO()
    try:
        call_command("worker_health", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue() + err.getvalue()


def test_with_no_cluster_running_the_health_check_fails():
    ClusterHeartbeat.objects.create(
        cluster_id=uuid.uuid4(), name="gone-cluster", host="h", pid=1, queue="idemdash",
        started_at=timezone.now() - timedelta(hours=1), took_work_at=timezone.now() - timedelta(minutes=5),
        stopped_at=timezone.now() - timedelta(minutes=5),
    )
    code, said = health()
    assert code == 1
    assert "gone-cluster" in said and "stopped" in said and "no worker cluster is running" in said


@pytest.mark.slow
def test_a_cluster_whose_workers_stop_taking_work_fails_the_health_check_and_shows_on_the_overview(
    settings, tmp_path, viewer_client
):
    settings.WORKER_STALE_SECONDS = 4
    log = tmp_path / "qcluster.log"
    cluster = start_qcluster(log, Q_WORKERS="2", WORKER_TICK_SECONDS="1", LOG_LEVEL="INFO")
    workers: list[int] = []
    try:
        row = until(lambda: ClusterHeartbeat.objects.filter(took_work_at__isnull=False).first(), "the cluster's first heartbeat", within=60, log=log)
        assert row.pid == cluster.pid and row.restarts == 0 and row.stopped_at is None
        first = row.took_work_at
        until(lambda: ClusterHeartbeat.objects.get().took_work_at > first, "a second heartbeat (the tick)", log=log)
        code, said = health("--here")
        assert code == 0, said
        assert f"{row.name} " in said and "taking work" in said
        page = viewer_client.get("/").content.decode()
        assert f'data-cluster="{row.name}" data-state="taking work"' in page

        workers = [int(pid) for pid in re.findall(r"ready for work at (\d+)", log.read_text())]
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)  # alive, and taking nothing
        # WORKER_STALE_SECONDS after the last work taken, the check fails ...
        code, said = until(lambda: (found := health())[0] == 1 and found, "the health check to fail", every=0.25,
                           log=log)
        assert cluster.poll() is None  # ... while the cluster runs and its scheduler fires, as it takes no work
        assert "not taking work" in said and "no worker cluster took work in the last 4 s" in said
        page = viewer_client.get("/").content.decode()
        assert f'data-cluster="{row.name}" data-state="not taking work"' in page
    finally:
        for pid in workers:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        kill_process(cluster)
        connection.close()
