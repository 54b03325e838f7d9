from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from idemdash.core.retention import Purger
from receipts import retention


class Command(BaseCommand):
    help = (
        "Delete expired receipts (archiving financial ones), old attempt logs and old outbox "
        "messages, in short batches: the same work as the hourly `receipts.purge` schedule."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count what is due; delete nothing.")
        parser.add_argument("--batch-size", type=int, default=None, help="Rows per transaction.")

    def handle(self, *args, dry_run: bool, batch_size: int | None, **options) -> None:
        if batch_size is not None and batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            # Progress bars come with the `server` extra; the core install purges without them.
            from tqdm import tqdm
        except ImportError:
            tqdm = None
        bars: list[Any] = []

        def progress(purger: Purger, due: int):
            # The raw stream: Django's OutputWrapper appends a newline to every write,
            # which would break the bar's carriage-return redraws.
            bar = tqdm(total=due, desc=purger.name, unit="row", file=self.stderr._out)
            bars.append(bar)
            return bar.update

        results = retention.purge(batch_size=batch_size, dry_run=dry_run, progress=progress if tqdm else None)
        for bar in bars:
            bar.close()
        for r in results:
            if dry_run:
                self.stdout.write(f"{r.name}: {r.due} due (dry run, nothing deleted)")
            else:
                extra = f", {r.archived} archived" if r.archived else ""
                self.stdout.write(f"{r.name}: {r.deleted} deleted in {r.batches} batch(es){extra}")
