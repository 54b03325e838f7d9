import socket
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from idemdash.worker.conf import setting
from idemdash.worker.models import ClusterHeartbeat


class Command(BaseCommand):
    help = (
        "Whether the worker clusters take work: one line per cluster seen in the last day; exits 1 "
        "when the newest time a running cluster took work is older than --max-age seconds (or none "
        "runs), for a supervisor's health check."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--max-age", type=int, default=None,
                            help="seconds (default: WORKER_STALE_SECONDS, 90)")
        parser.add_argument("--here", action="store_true",
                            help=f"only the clusters of this host ({socket.gethostname()})")

    def handle(self, *args: Any, max_age: int | None, here: bool, **options: Any) -> None:
        max_age = setting("WORKER_STALE_SECONDS") if max_age is None else max_age
        rows = ClusterHeartbeat.objects.recent()
        if here:
            rows = rows.filter(host=socket.gethostname())
        running = []
        for row in rows:
            took = "never" if row.took_work_at is None else f"{row.idle_seconds:.0f} s ago"
            self.stdout.write(
                f"{row.name} {row.host}:{row.pid} queue={row.queue} {row.state}: took work {took}, "
                f"{row.restarts} restarts" + (f", stopped {row.stopped_at:%Y-%m-%d %H:%M:%S}" if row.stopped_at else "")
            )
            if not row.stopped_at:
                running.append(row.idle_seconds)
        if not running:
            self.stderr.write("no worker cluster is running")
            sys.exit(1)
        if min(running) > max_age:
            self.stderr.write(f"no worker cluster took work in the last {max_age} s")
            sys.exit(1)
