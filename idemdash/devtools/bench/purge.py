"""`python -m idemdash.devtools.bench.purge`: one purge of expired receipts, timed, as JSON on stdout.

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
    parser.add_argument("--budget", type=float, required=True,
                        help="stop taking new batches after this many seconds (the rate is what was deleted)")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "idemdash.devtools.bench.settings")
    import django

    django.setup()
    from django.utils import timezone

    from idemdash.core.retention import purge_batches
    from receipts import retention
    from receipts.conf import setting

    purger = next(p for p in retention.PURGERS if p.name == "receipts.expired")
    batch_size = setting("RECEIPTS_RETENTION_BATCH_SIZE")
    now = timezone.now()
    started = time.perf_counter()
    deleted = archived = batches = 0
    finished = False
    # A few batches at a time, so that a time budget can stop a purge of a large backlog;
    # each batch is the same short transaction the hourly purge runs.
    while time.perf_counter() - started < args.budget:
        result = purge_batches(purger, now, batch_size=batch_size, max_batches=5)
        deleted, archived, batches = deleted + result.deleted, archived + result.archived, batches + result.batches
        if result.batches < 5 or result.deleted < 5 * batch_size:
            finished = True
            break
    took = time.perf_counter() - started
    json.dump({"deleted": deleted, "archived": archived, "batches": batches, "batch_size": batch_size,
               "seconds": took, "finished": finished}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
