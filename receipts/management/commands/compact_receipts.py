from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from receipts import compaction


class Command(BaseCommand):
    help = (
        "Drop the stored request and response body of completed receipts past their operation's "
        "compact_after_seconds, in short batches: the same work as the `receipts.compact` schedule."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--batch-size", type=int, default=None, help="Receipts per transaction.")

    def handle(self, *args, batch_size: int | None, **options) -> None:
        if batch_size is not None and batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        for r in compaction.compact(batch_size=batch_size):
            self.stdout.write(f"{r.operation}: {r.compacted} compacted in {r.batches} batch(es)")
