"""`python -m idemdash.devtools.bench.inprocess`: the CPU each hot path costs in-process.

`make bench` measures through gunicorn with a load generator, and scenario 4 also runs the
worker on the same cores, so on a shared two-core machine its ratios move with whatever else
runs. This measures the hot paths alone, in one process, through Django's test Client (URL
resolver, middleware, view, database; no gunicorn, no worker, no network):

- `bare`: the bench's unprotected insert (`/bench/insert/bare/`), the yardstick;
- `claim`: the same insert under `@idempotent` with a fresh key;
- `replay`: the same keys again, answered from their receipts;
- `delivery`: a signed Stripe delivery of a new event (verified, stored with its task);
- `duplicate`: a delivery of an event already stored.

And then the in-process API (idemdash/devtools/bench/cputime.py:measure_run_once).

The figure is the median, over rounds, of `time.process_time()` per request, and each path's
ratio to `bare` measured in the same run. To compare two checkouts, run each alternately
against its own database (docs/benchmarks/2026-11-24-issue-13-before-after.md).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import uuid

from idemdash.devtools.bench.cputime import RUN_ONCE_PATHS, cpu_per_call, measure_run_once

PATHS = ("bare", "claim", "replay", "delivery", "duplicate")


def measure(*, requests: int, rounds: int) -> dict[str, float]:
    """Median CPU µs per request of each path in PATHS."""
    from django.test import Client

    from idemdash.devtools.bench.runner import BENCH_ENDPOINT, bench_webhook_endpoint, stripe_delivery

    secret = bench_webhook_endpoint()
    client = Client()
    run = uuid.uuid4().hex[:8]

    def insert(n: int, key: str | None, replayed: bool = False) -> None:
        headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        response = client.post(f"/bench/insert/{'protected' if key else 'bare'}/", data=json.dumps({"n": n}),
                               content_type="application/json", **headers)
        if response.status_code not in (200, 201) or replayed != (response.headers.get("Idempotent-Replayed") == "true"):
            raise RuntimeError(f"insert answered {response.status_code}: {response.content[:200]!r}")

    def deliveries(prefix: str, keys: int | None = None) -> list[tuple[bytes, dict[str, str]]]:
        # Signed before the clock starts: signing is the provider's cost, not ours.
        return [stripe_delivery(secret, f"evt_{prefix}_{n % keys if keys else n}", n) for n in range(requests)]

    def deliver(delivery: tuple[bytes, dict[str, str]]) -> None:
        body, headers = delivery
        response = client.post(f"/webhooks/{BENCH_ENDPOINT}/", data=body, content_type="application/json",
                               HTTP_STRIPE_SIGNATURE=headers["Stripe-Signature"])
        if response.status_code != 200:
            raise RuntimeError(f"delivery answered {response.status_code}: {response.content[:200]!r}")

    def one_round(tag: str) -> dict[str, float]:
        keys = [f"inprocess-{run}-{tag}-{n}" for n in range(requests)]
        new, dup = deliveries(f"inprocess{run}new{tag}"), deliveries(f"inprocess{run}dup", max(1, requests // 2))
        return {
            "bare": cpu_per_call([lambda n=n: insert(n, None) for n in range(requests)]),
            "claim": cpu_per_call([lambda n=n: insert(n, keys[n]) for n in range(requests)]),
            "replay": cpu_per_call([lambda n=n: insert(n, keys[n], replayed=True) for n in range(requests)]),
            "delivery": cpu_per_call([lambda d=d: deliver(d) for d in new]),
            "duplicate": cpu_per_call([lambda d=d: deliver(d) for d in dup]),
        }

    one_round("warm")  # connections, prepared statements, the duplicates' first deliveries
    rounds_measured = [one_round(str(r)) for r in range(rounds)]
    return {path: statistics.median(r[path] for r in rounds_measured) for path in PATHS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idemdash.devtools.bench.inprocess", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests per path and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="", help="printed before the line, e.g. the commit")
    args = parser.parse_args(argv)

    from idemdash.devtools.bench.__main__ import DEFAULT_DATABASE_URL, ensure_database

    os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL.replace("idemdash_bench", "idemdash_inprocess"))
    ensure_database(os.environ["DATABASE_URL"])
    os.environ["DJANGO_SETTINGS_MODULE"] = "idemdash.devtools.bench.settings"
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))  # as `make bench` does
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")  # the test Client's host
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    cpu = measure(requests=args.requests, rounds=args.rounds)
    figures = [f"{path} {cpu[path]:.0f} µs" + ("" if path == "bare" else f" ({cpu[path] / cpu['bare']:.2f}x bare)")
               for path in PATHS]
    print(f"{args.label} CPU per request, median of {args.rounds} rounds: {', '.join(figures)}".strip())
    cpu = measure_run_once(calls=args.requests, rounds=args.rounds)
    figures = [f"{path} {cpu[path]:.0f} µs" + ("" if path == "insert" else f" ({cpu[path] / cpu['insert']:.2f}x insert)")
               for path in RUN_ONCE_PATHS]
    print(f"{args.label} CPU per call in process, median of {args.rounds} rounds: {', '.join(figures)}".strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
