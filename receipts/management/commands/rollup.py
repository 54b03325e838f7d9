from __future__ import annotations

from django.core.management.base import BaseCommand

from idemdash.core import rollup


class Command(BaseCommand):
    help = (
        "Roll every installed roll-up (the attempt log, webhook deliveries) up by hour until "
        "it is caught up: the work of the per-minute `receipts.rollup` schedule, all at once "
        "(a backfill). --rebuild first empties each roll-up and recomputes it from its log."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rebuild", action="store_true", help="Empty the roll-ups and recompute every hour.")

    def handle(self, *args, rebuild: bool, **options) -> None:
        for rolled in rollup.installed_rollups():
            if rebuild:
                rolled.rewind(None)
            results = rolled.catch_up()
            hours = sum(int((r.end - r.start) / rollup.HOUR) for r in results if r.start is not None)
            self.stdout.write(
                f"{rolled.name}: {hours} hour(s) recomputed in {len(results)} run(s); "
                f"rolled up until {results[-1].rolled_until}"
            )
