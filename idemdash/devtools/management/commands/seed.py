from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from idemdash.devtools import seeding


class Command(BaseCommand):
    help = (
        "Bulk-load realistic seeded receipts (with their attempt logs), webhook events (with "
        "deliveries) and outbox messages (with attempts): COPY on PostgreSQL, bulk_create on "
        "SQLite. Seeded rows are marked (keys `seed_…`) and --delete removes only them."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--receipts", type=int, default=0)
        parser.add_argument("--events", type=int, default=0)
        parser.add_argument("--outbox", type=int, default=0)
        parser.add_argument("--batch", type=int, default=10_000, help="Rows per transaction.")
        parser.add_argument("--expired", action="store_true", help="Every seeded receipt already expired.")
        parser.add_argument("--random-seed", type=int, default=None, help="Repeatable data.")
        parser.add_argument("--delete", action="store_true", help="Delete all seeded rows first.")

    def handle(self, *args, receipts: int, events: int, outbox: int, batch: int, expired: bool,
               random_seed: int | None, delete: bool, **options) -> None:
        if min(receipts, events, outbox) < 0 or batch < 1:
            raise CommandError("counts must be >= 0 and --batch >= 1")
        if delete:
            deleted = seeding.delete_seeded()
            self.stdout.write("deleted " + ", ".join(f"{n} {name}" for name, n in deleted.items()))
        started = time.monotonic()
        # The raw stream: Django's OutputWrapper adds a newline per write, which would break
        # tqdm's carriage-return redraws.
        with seeding.progress_bars(self.stderr._out) as progress:
            counts = seeding.seed(receipts=receipts, events=events, outbox=outbox, batch=batch,
                                  expired_only=expired, rng_seed=random_seed, progress=progress)
        took = time.monotonic() - started
        self.stdout.write(
            f"seeded {counts.receipts} receipts ({counts.attempts} attempts), {counts.events} events "
            f"({counts.deliveries} deliveries), {counts.outbox} outbox messages ({counts.outbox_attempts} "
            f"attempts) in {took:.1f}s"
        )
