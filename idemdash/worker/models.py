from __future__ import annotations

from datetime import timedelta

from django.db import models
from django.utils import timezone

from idemdash.worker.conf import setting


class ClusterHeartbeatQuerySet(models.QuerySet):
    def recent(self, days: int = 1) -> ClusterHeartbeatQuerySet:
        """The clusters that took work, or started, in the last `days`, newest first."""
        since = timezone.now() - timedelta(days=days)
        return self.filter(models.Q(took_work_at__gte=since) | models.Q(started_at__gte=since)).order_by("-started_at")


class ClusterHeartbeat(models.Model):
    """One row per running `manage.py qcluster` (its main process): when its workers last
    took work. Written by the cluster itself (idemdash/worker/liveness.py), read by
    `manage.py worker_health` and the dashboard's overview (by model name: the dashboard
    does not import the worker)."""

    cluster_id = models.UUIDField(primary_key=True)
    name = models.CharField(max_length=100)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queue = models.CharField(max_length=100)
    started_at = models.DateTimeField()
    # Times the cluster started its processes afresh after one of them died (cluster.py).
    restarts = models.PositiveIntegerField(default=0)
    took_work_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    objects = ClusterHeartbeatQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.host}:{self.pid})"

    @property
    def idle_seconds(self) -> float:
        """Seconds since its workers last took work (since it started, if they never did)."""
        return (timezone.now() - (self.took_work_at or self.started_at)).total_seconds()

    @property
    def state(self) -> str:
        if self.stopped_at:
            return "stopped"
        return "not taking work" if self.idle_seconds > setting("WORKER_STALE_SECONDS") else "taking work"
