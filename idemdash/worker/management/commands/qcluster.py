import os
import sys
from typing import Any

from django.conf import settings
from django_q.management.commands.qcluster import Command as DjangoQCommand

from idemdash.worker.cluster import Cluster


class Command(DjangoQCommand):
    """django-q2's `qcluster` (same options), running a cluster that stops cleanly
    whichever of its processes SIGTERM reaches, and that starts its processes afresh when
    one of them dies: see idemdash/worker/cluster.py. Exits non-zero when it cannot keep
    its processes running, for its supervisor to restart it."""

    def handle(self, *args: Any, **options: Any) -> None:
        settings.SECRET_KEY  # noqa: B018 -- django-q2 signs tasks with it: fail before starting
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        q = Cluster()
        if options.get("run_once"):
            q.start()
            q.stop()
            return
        code = q.run()
        if code:
            sys.exit(code)
