"""`python -m idemdash.bench.purge`: one purge of expired receipts, timed, as JSON on stdout.

A separate process, as the hourly purge runs in the qcluster or from cron, so that its CPU
and its connection are its own and not the load generator's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=None)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "idemdash.bench.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.utils import timezone

    from receipts import retention

    purger = next(p for p in retention.PURGERS if p.name == "receipts.expired")
    batch_size = args.batch_size or getattr(settings, "RETENTION_BATCH_SIZE", 1000)
    started = time.perf_counter()
    result = retention.purge_batches(purger, timezone.now(), batch_size=batch_size)
    took = time.perf_counter() - started
    json.dump({"deleted": result.deleted, "archived": result.archived, "batches": result.batches,
               "batch_size": batch_size, "seconds": took}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
