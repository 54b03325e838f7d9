from django.core.management.base import BaseCommand

from receipts.outbox.drain import drain


class Command(BaseCommand):
    help = "Send due outbox messages until none is due (or keep watching with --watch)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--watch", action="store_true", help="Keep looking every second until stopped.")
        parser.add_argument("--max-seconds", type=float, default=None)
        parser.add_argument("--batch-size", type=int, default=None)

    def handle(self, *args, watch: bool, max_seconds: float | None, batch_size: int | None, **options) -> None:
        if watch and max_seconds is None:
            max_seconds = float("inf")
        report = drain(max_seconds=max_seconds, idle_wait=1 if watch else 0, batch_size=batch_size)
        self.stdout.write(" ".join(f"{k}={v}" for k, v in report.as_dict().items()))
