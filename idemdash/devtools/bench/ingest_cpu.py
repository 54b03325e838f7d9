"""`python -m idemdash.devtools.bench.ingest_cpu`: the CPU one webhook delivery costs in-process.

Scenario 4 of `make bench` measures ingest through gunicorn while the worker processes the
new events on the same cores, so its ratios move with whatever else the machine does. This
measures the ingest path alone: signed Stripe deliveries posted through Django's test Client
to the bench's endpoint (URL resolver, middleware, verification, `store_delivery` with the
task row written in the same statement), no gunicorn, no worker. The figure is the median,
over rounds, of `time.process_time()` per request: compare two checkouts by running each
alternately against its own database (docs/benchmarks/2026-11-24-issue-13-before-after.md).
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import time
import uuid
from typing import Any


def measure(*, requests: int, rounds: int, duplicate_keys: int) -> dict[str, dict[str, float]]:
    """Median CPU and wall time (µs per request) of new deliveries and of duplicates."""
    from django.test import Client

    from idemdash.devtools.bench.runner import BENCH_ENDPOINT, bench_webhook_endpoint, stripe_delivery

    secret = bench_webhook_endpoint()
    client = Client()
    run = uuid.uuid4().hex[:8]

    def post_all(prefix: str, keys: int | None = None) -> tuple[float, float]:
        # Signed before the clock starts: signing is the provider's cost, not ours.
        deliveries = [stripe_delivery(secret, f"evt_{prefix}_{n % keys if keys else n}", n) for n in range(requests)]
        wall, cpu = time.perf_counter(), time.process_time()
        for body, headers in deliveries:
            response = client.post(f"/webhooks/{BENCH_ENDPOINT}/", data=body, content_type="application/json",
                                   HTTP_STRIPE_SIGNATURE=headers["Stripe-Signature"])
            if response.status_code != 200:
                raise RuntimeError(f"delivery answered {response.status_code}: {response.content[:200]!r}")
        return (time.process_time() - cpu) / requests * 1e6, (time.perf_counter() - wall) / requests * 1e6

    post_all(f"ingest{run}warm", min(50, requests))
    samples: dict[str, list[tuple[float, float]]] = {"new": [], "duplicate": []}
    for r in range(rounds):
        samples["new"].append(post_all(f"ingest{run}new{r}"))
        samples["duplicate"].append(post_all(f"ingest{run}dup", duplicate_keys))
    return {
        kind: {"cpu_us": statistics.median(s[0] for s in runs), "wall_us": statistics.median(s[1] for s in runs)}
        for kind, runs in samples.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idemdash.devtools.bench.ingest_cpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400, help="deliveries per round and kind")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="", help="printed before each line, e.g. the commit")
    args = parser.parse_args(argv)

    from idemdash.devtools.bench.__main__ import DEFAULT_DATABASE_URL, ensure_database

    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL.replace("idemdash_bench", "idemdash_ingest_cpu"))
    ensure_database(os.environ["DATABASE_URL"])
    os.environ["DJANGO_SETTINGS_MODULE"] = "idemdash.devtools.bench.settings"
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))  # as `make bench` does
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")  # the test Client's host
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    figures: dict[str, Any] = measure(requests=args.requests, rounds=args.rounds,
                                      duplicate_keys=max(1, args.requests // 2))
    for kind, values in figures.items():
        print(f"{args.label} {kind}: CPU {values['cpu_us']:.0f} µs, wall {values['wall_us']:.0f} µs per delivery".strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
