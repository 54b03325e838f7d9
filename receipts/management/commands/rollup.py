from __future__ import annotations

from django.core.management.base import BaseCommand

from receipts import rollup


class Command(BaseCommand):
    help = (
        "Roll the attempt log up by hour until the roll-up is caught up: the work of the "
        "per-minute `receipts.rollup` schedule, all at once (a backfill). --rebuild first "
        "empties the roll-up and recomputes it from the oldest attempt."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rebuild", action="store_true", help="Empty the roll-up and recompute every hour.")

    def handle(self, *args, rebuild: bool, **options) -> None:
        if rebuild:
            rollup.rewind(None)
        results = rollup.catch_up()
        hours = sum(int((r.end - r.start) / rollup.HOUR) for r in results if r.start is not None)
        self.stdout.write(
            f"{hours} hour(s) recomputed in {len(results)} run(s); rolled up until {results[-1].rolled_until}"
        )
