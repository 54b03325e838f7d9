"""Whether a cluster takes work: its heartbeat row, the tick that keeps it fresh when no
other task comes, and the verdict that `manage.py worker_health` and the dashboard give.

Each worker writes `took_work_at` when it starts a task (`_took_work`). The scheduler, which
runs in the sentinel, writes nothing here: a cluster whose workers are wedged keeps
scheduling. A cluster has stopped taking work when its `took_work_at` is older than
`WORKER_STALE_SECONDS` (idemdash/worker/models.py:ClusterHeartbeat.state)."""

from __future__ import annotations

import logging
import socket
import time
import uuid
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, models
from django.utils import timezone
from django.utils.module_loading import import_string

from idemdash.core.discovery import declared_by_apps
from idemdash.worker.models import ClusterHeartbeat

log = logging.getLogger(__name__)

TICK_TASK = "idemdash.worker.liveness.tick"

# Set in the sentinel before it forks its processes, so every worker knows its cluster.
CLUSTER_ID: uuid.UUID | None = None
_last_write = 0.0


def started(cluster_id: uuid.UUID, name: str, pid: int, queue: str) -> None:
    """The sentinel has (re)started the cluster's processes."""
    rows = ClusterHeartbeat.objects
    try:
        if not rows.filter(pk=cluster_id).update(restarts=models.F("restarts") + 1, stopped_at=None):
            rows.create(cluster_id=cluster_id, name=name, host=socket.gethostname(), pid=pid, queue=queue,
                        started_at=timezone.now())
            # Rows of clusters gone for a day are of no use to anyone.
            rows.filter(took_work_at__lt=timezone.now() - timedelta(days=1)).delete()
    except DatabaseError as exc:
        log.warning("cluster %s: could not write its heartbeat row (%s)", name, _one_line(exc))


def stopped(cluster_id: uuid.UUID) -> None:
    """The sentinel has stopped the cluster."""
    try:
        ClusterHeartbeat.objects.filter(pk=cluster_id).update(stopped_at=timezone.now())
    except DatabaseError as exc:
        log.warning("cluster %s: could not record its stop (%s)", cluster_id, _one_line(exc))


def _took_work(sender: Any = None, **kwargs: Any) -> None:
    """django-q2's pre_execute, in a worker, before each task: `took_work_at`, at most once a
    second per worker. Never raises: a failure here would kill the worker."""
    global _last_write
    if CLUSTER_ID is None or time.monotonic() - _last_write < 1:
        return
    _last_write = time.monotonic()
    try:
        ClusterHeartbeat.objects.filter(pk=CLUSTER_ID).update(took_work_at=timezone.now())
    except Exception as exc:  # noqa: BLE001 -- the database may be down; the task says so itself
        log.warning("cluster %s: could not record work taken (%s)", CLUSTER_ID, _one_line(exc))


def tick() -> dict[str, str]:
    """The task the sentinel hands its workers every WORKER_TICK_SECONDS: runs every app's
    `schedules.TICKS` (dotted paths), each on its own, one line logged for a failure. Put
    straight into the cluster's task queue, not through the broker, so an idle cluster still
    takes work and the TICKS (the webhook sweep, a short outbox drain) run every few seconds,
    finer than django-q2's schedules (a minute at best) and with the broker down."""
    done = {}
    for path in declared_by_apps("schedules", "TICKS"):
        try:
            result = import_string(path)()
            done[path] = "ok" if result is None else str(result)
        except Exception as exc:  # noqa: BLE001 -- one tick's failure must not skip the others
            log.warning("tick %s failed: %s", path, _one_line(exc))
            done[path] = "failed"
    return done


def tick_package(name: str) -> dict[str, Any]:
    """The tick as a django-q2 task, as a worker takes it from the task queue. Not saved when
    it succeeds (save=False), and with no ack id: it never went through the broker."""
    from django_q.conf import Conf

    return {
        "id": uuid.uuid4().hex, "name": f"tick-{name}", "func": TICK_TASK, "args": (), "kwargs": {},
        "started": timezone.now(), "save": False, "cluster": Conf.CLUSTER_NAME, "group": "idemdash.tick",
    }


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
