"""`python -m idemdash.devtools.bench [--quick]`: see idemdash/devtools/bench/runner.py and docs/benchmarks.md."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/idemdash_bench"


def ensure_database(url: str) -> None:
    """Create the bench database if it is missing; fail clearly if PostgreSQL is not there."""
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    if parts.scheme not in ("postgres", "postgresql"):
        sys.exit(f"bench: needs PostgreSQL; DATABASE_URL is {parts.scheme}://…")
    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    try:
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                print(f"bench: created database {name}")
    except psycopg.OperationalError as exc:
        sys.exit(
            f"bench: PostgreSQL at {parts.hostname}:{parts.port or 5432} does not answer ({exc}).\n"
            "Start it (e.g. `pg_ctlcluster 15 main start`) or set DATABASE_URL=postgres://user@host:port/db."
        )


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

    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    ensure_database(url)
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "idemdash.devtools.bench.settings"
    # The settings refuse to start without a strong key; a bench run makes its own, which
    # the servers it starts inherit.
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    import django

    django.setup()
    from django.conf import settings

    from idemdash.devtools.bench.runner import run

    return run(quick=args.quick, port=args.port, out_dir=args.out or Path(settings.VAR_DIR) / "bench", only=only,
               receipts=args.receipts)


if __name__ == "__main__":
    sys.exit(main())
