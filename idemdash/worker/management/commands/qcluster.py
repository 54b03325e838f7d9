import os
from typing import Any

from django.conf import settings
from django_q.management.commands.qcluster import Command as DjangoQCommand

from idemdash.worker.cluster import Cluster


class Command(DjangoQCommand):
    """django-q2's `qcluster` (same options), running a cluster that stops cleanly
    whichever of its processes SIGTERM reaches: see idemdash/worker/cluster.py."""

    def handle(self, *args: Any, **options: Any) -> None:
        settings.SECRET_KEY  # noqa: B018 -- django-q2 signs tasks with it: fail before starting
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        q = Cluster()
        q.start()
        if options.get("run_once"):
            q.stop()
