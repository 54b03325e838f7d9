"""`python -m idemdash.devtools.bench [--quick]`: see idemdash/devtools/bench/runner.py and docs/benchmarks.md."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from idemdash.devtools.bench import servers

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/idemdash_bench"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idemdash.devtools.bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, under two minutes")
    parser.add_argument("--port", type=int, default=int(os.environ.get("BENCH_PORT", 0)) or None,
                        help="gunicorn's port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default var/bench/)")
    parser.add_argument("--only", default="", help="comma-separated scenario numbers (1-6, 8-14), e.g. 1,2; "
                        "such a run leaves latest.* to the last complete run")
    parser.add_argument("--receipts", type=int, default=int(os.environ.get("BENCH_RECEIPTS", 0)) or None,
                        help="seed the log to this many receipts (three attempts each) by set-based SQL, e.g. "
                        "10000000; a tenth expire, the purge's backlog (default: the full or quick sizes)")
    args = parser.parse_args(argv)
    try:
        only = {int(n) for n in args.only.split(",") if n.strip()} or None
    except ValueError:
        parser.error(f"--only takes scenario numbers, e.g. 1,2; got {args.only!r}")
    if only and not only <= {1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14}:
        parser.error(f"--only: scenarios are numbered 1 to 6 and 8 to 14 (7, memory, ends every run); got {args.only!r}")

    servers.start_django(DEFAULT_DATABASE_URL)
    from django.conf import settings

    from idemdash.devtools.bench.runner import run

    return run(quick=args.quick, port=args.port, out_dir=args.out or Path(settings.VAR_DIR) / "bench", only=only,
               receipts=args.receipts)


if __name__ == "__main__":
    sys.exit(main())
