from __future__ import annotations

import json
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from receipts import coverage


class Command(BaseCommand):
    help = (
        "List every route of the URLconf that takes POST, PUT, PATCH or DELETE, with the operation "
        "that protects it (or none), and each operation's keys and duplicates in the last 24 hours "
        "(docs/coverage.md)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", dest="as_json", help="One JSON document, for scripts.")
        parser.add_argument("--all", action="store_true", dest="everything",
                            help="Also idemdash's, Django's, DRF's and Ninja's own routes.")
        parser.add_argument("--fail-unprotected", action="append", default=[], metavar="PATTERN",
                            help="Exit 1 when a route whose path (/shop/*) or URL name (shop:*) matches "
                            "this shell-style pattern is unprotected; may be given more than once.")

    def handle(self, *args, as_json: bool, everything: bool, fail_unprotected: list[str], **options) -> None:
        found = coverage.routes(everything=everything)
        rows = coverage.table(found, window=timedelta(hours=24))
        if as_json:
            self.stdout.write(json.dumps({"window": "24h", "routes": rows}, indent=2))
        else:
            self._table(rows)
        failing = coverage.unprotected(found, fail_unprotected)
        if failing:
            named = ", ".join(f"{r.method} /{r.path}" for r in failing)
            raise CommandError(f"{len(failing)} route(s) matching --fail-unprotected take writes without a key: {named}")

    def _table(self, rows: list[dict]) -> None:
        header = ("METHOD", "PATH", "VIEW", "KIND", "PROTECTION", "TRAFFIC 24H", "DUPLICATES 24H")
        lines = [header] + [(
            r["method"], "/" + r["path"], r["view"], r["kind"],
            r["operation"] or r["protected_by"] or "unprotected",
            f"{r['keys']} keys" if r["keys"] is not None else f"{r['requests']} requests" if r["requests"] is not None else "",
            "" if r["duplicates"] is None else str(r["duplicates"]),
        ) for r in rows]
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
        for line in lines:
            self.stdout.write("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip())
        protected = sum(r["protected"] for r in rows)
        self.stdout.write(f"\n{protected} of {len(rows)} write route(s) protected.")

