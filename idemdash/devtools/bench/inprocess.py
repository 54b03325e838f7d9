"""`python -m idemdash.devtools.bench.inprocess`: the CPU each hot path costs in-process.

Each path of PATHS runs through Django's test Client in one process, with no gunicorn, worker
or network, so its ratios move less than `make bench`'s on a shared machine. Printed: the
median CPU per request and its ratio to `bare`, for this process, for the database server's
process serving it (when on this machine) and for both; then the in-process API
(idemdash/devtools/bench/cputime.py:measure_run_once). `--breakdown` shows instead where a
protected request's CPU goes. To compare two checkouts, run each alternately against its own
database (docs/benchmarks/2026-11-24-issue-13-before-after.md)."""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import os
import pkgutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

from idemdash.devtools.bench.cputime import RUN_ONCE_PATHS, cpu_per_call, measure_run_once, median_of_rounds

# bare: the bench's unprotected insert (/bench/insert/bare/), the yardstick; claim: the same
# insert under @idempotent with a fresh key; replay: the same keys again, answered from their
# receipts; floor: the insert with only what any protection claiming before it and completing
# after it adds, a transaction and two trivial statements (/bench/insert/floor/);
# replay_ceiling: one trivial statement and the insert's answer without the insert, the least
# any replay from the database can cost (/bench/replay/ceiling/); delivery: a signed Stripe
# delivery of a new event (verified, stored with its task); duplicate: a delivery of an event
# already stored; observed: the bare insert under the observer of unprotected routes
# (receipts/observe.py), its notes written every 100 requests (a process's batch every 2 s).
PATHS = ("bare", "observed", "claim", "replay", "floor", "replay_ceiling", "delivery", "duplicate")


def _inserter(client: Any) -> Callable[..., None]:
    """POSTs the bench's insert through the test Client to `view` (a path under /bench/:
    insert/bare, insert/protected, insert/floor, replay/ceiling; protected when a
    key is given, else bare); refuses a request that did not do what its path is named for."""

    def insert(n: int, key: str | None, replayed: bool = False, view: str | None = None) -> None:
        headers = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
        view = view or ("insert/protected" if key else "insert/bare")
        response = client.post(f"/bench/{view}/", data=json.dumps({"n": n}),
                               content_type="application/json", **headers)
        if response.status_code not in (200, 201) or replayed != (response.headers.get("Idempotent-Replayed") == "true"):
            raise RuntimeError(f"insert answered {response.status_code}: {response.content[:200]!r}")

    return insert


def _observing_client() -> Any:
    """A test Client whose handler runs the observer, which the bench's settings leave out,
    in the middleware of scenario 14's observed server."""
    from django.test import Client, override_settings

    from idemdash.devtools.bench.observed_settings import MIDDLEWARE

    client = Client()
    with override_settings(MIDDLEWARE=MIDDLEWARE):
        client.handler.load_middleware()
    return client


def measure(*, requests: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median CPU µs per request of each path in PATHS: of this process ("web"), of the
    database server's process serving its connection ("db", absent when that is not on this
    machine), and of both ("both"). This process's CPU is `time.process_time()`."""
    from django.test import Client

    from idemdash.devtools.bench.runner import BENCH_ENDPOINT, payment_delivery, webhook_endpoint
    from receipts import observe

    secret = webhook_endpoint()

    client = Client()
    insert, observed = _inserter(client), _inserter(_observing_client())
    run = uuid.uuid4().hex[:8]

    def observed_insert(n: int) -> None:
        observed(n, None)
        if n % 100 == 99 or n == requests - 1:
            observe.flush()

    def deliveries(prefix: str, keys: int | None = None) -> list[tuple[bytes, dict[str, str]]]:
        # Signed before the clock starts: signing is the provider's cost, not ours.
        return [payment_delivery(secret, f"evt_{prefix}_{n % keys if keys else n}", n) for n in range(requests)]

    def deliver(delivery: tuple[bytes, dict[str, str]]) -> None:
        body, headers = delivery
        response = client.post(f"/webhooks/{BENCH_ENDPOINT}/", data=body, content_type="application/json",
                               HTTP_STRIPE_SIGNATURE=headers["Stripe-Signature"])
        if response.status_code != 200:
            raise RuntimeError(f"delivery answered {response.status_code}: {response.content[:200]!r}")

    def both(calls: list) -> dict[str, float]:
        server = database_process_cpu()
        before = server() if server else 0.0
        web = cpu_per_call(calls)
        if server is None:
            return {"web": web}
        db = (server() - before) / len(calls) * 1e6
        return {"web": web, "db": db, "both": web + db}

    def one_round(tag: str) -> dict[str, dict[str, float]]:
        keys = [f"inprocess-{run}-{tag}-{n}" for n in range(requests)]
        new, dup = deliveries(f"inprocess{run}new{tag}"), deliveries(f"inprocess{run}dup", max(1, requests // 2))
        return {
            "bare": both([lambda n=n: insert(n, None) for n in range(requests)]),
            "observed": both([lambda n=n: observed_insert(n) for n in range(requests)]),
            "claim": both([lambda n=n: insert(n, keys[n]) for n in range(requests)]),
            "replay": both([lambda n=n: insert(n, keys[n], replayed=True) for n in range(requests)]),
            "floor": both([lambda n=n: insert(n, None, view="insert/floor") for n in range(requests)]),
            "replay_ceiling": both([lambda n=n: insert(n, keys[n], True, "replay/ceiling") for n in range(requests)]),
            "delivery": both([lambda d=d: deliver(d) for d in new]),
            "duplicate": both([lambda d=d: deliver(d) for d in dup]),
        }

    return median_of_rounds(one_round, rounds)  # its warm-up makes the duplicates' first deliveries


# The parts of a protected request --breakdown times: (name, dotted path), each wrapped where
# it is looked up when called, so every call is counted.
PARTS = (
    ("view's insert", "idemdash.devtools.bench.views._insert"),
    ("claim", "receipts.store.claim"),
    ("completion", "receipts.store.complete"),
    ("COMMIT", "django.db.backends.base.base.BaseDatabaseWrapper._commit"),
)
# Each path --breakdown measures, and the bench view it posts to (bare without a key).
BREAKDOWN_PATHS = {"bare": "insert/bare", "claim": "insert/protected"}


def _counted(original: Callable, name: str, spent: dict[str, float]) -> Callable:
    """`original`, adding the process time of each call to spent[name]."""

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[name] += time.process_time() - started

    return counted


@contextlib.contextmanager
def _counting(spent: dict[str, float]) -> Iterator[None]:
    """While open, each of PARTS adds the process time of its calls to spent[name]."""
    with contextlib.ExitStack() as patches:
        for name, target in PARTS:
            patches.enter_context(mock.patch(target, _counted(pkgutil.resolve_name(target), name, spent)))
        yield


def breakdown(*, requests: int, rounds: int) -> dict[str, dict[str, float]]:
    """Median CPU µs per request, in this process, of each path in BREAKDOWN_PATHS with fresh
    keys: "total", each of PARTS that it called, and "rest" (what is left of the total: Django's
    request handling and the decorator's own logic). Each part (the view's insert, the claim,
    the completion, the COMMIT) is a function wrapped, at the module attribute it is called
    through, by a process-time counter."""
    from django.test import Client

    insert = _inserter(Client())
    run = uuid.uuid4().hex[:8]

    def one_round(tag: str) -> dict[str, dict[str, float]]:
        figures = {}
        for path, view in BREAKDOWN_PATHS.items():
            spent: dict[str, float] = collections.defaultdict(float)
            keys = [None if path == "bare" else f"breakdown-{run}-{tag}-{path}-{n}" for n in range(requests)]
            calls = [lambda n=n: insert(n, keys[n], view=view) for n in range(requests)]
            with _counting(spent):
                total = cpu_per_call(calls)
            parts = {name: seconds / requests * 1e6 for name, seconds in spent.items()}
            figures[path] = {"total": total, **parts, "rest": total - sum(parts.values())}
        return figures

    return median_of_rounds(one_round, rounds)


def database_process_cpu() -> Callable[[], float] | None:
    """A reader of the CPU seconds spent so far by the PostgreSQL process serving this
    connection (servers.cpu_seconds), or None when that process is not on this machine."""
    from django.db import connection

    from idemdash.devtools.bench.servers import cpu_seconds

    with connection.cursor() as c:
        c.execute("SELECT pg_backend_pid()")
        pid = c.fetchone()[0]
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
            return None  # another machine's pid, which is some other process here
    except OSError:
        return None
    return lambda: cpu_seconds(pid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idemdash.devtools.bench.inprocess", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests per path and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--label", default="", help="printed before the line, e.g. the commit")
    parser.add_argument("--breakdown", action="store_true",
                        help="where a protected request's CPU goes in this process, part by part, instead")
    args = parser.parse_args(argv)

    from idemdash.devtools.bench.servers import start_django

    os.environ.setdefault("ALLOWED_HOSTS", "testserver")  # the test Client's host
    start_django("postgres://postgres@127.0.0.1:5432/idemdash_inprocess")
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if args.breakdown:
        for path, parts in breakdown(requests=args.requests, rounds=args.rounds).items():
            figures = ", ".join(f"{part} {us:.0f} µs" for part, us in parts.items())
            print(f"{args.label} {path}, CPU per request in this process, median of {args.rounds} rounds: {figures}".strip())
        return 0
    cpu = measure(requests=args.requests, rounds=args.rounds)
    for part, what in (("web", "CPU per request"), ("db", "database CPU per request"),
                       ("both", "CPU per request with the database's")):
        if part not in cpu["bare"]:
            print(f"{args.label} {what}: the database server is not on this machine".strip())
            continue
        bare = cpu["bare"][part]  # 0 only when read in clock ticks and a short run took less than one
        figures = [f"{path} {cpu[path][part]:.0f} µs"
                   + ("" if path == "bare" or not bare else f" ({cpu[path][part] / bare:.2f}x bare)") for path in PATHS]
        print(f"{args.label} {what}, median of {args.rounds} rounds: {', '.join(figures)}".strip())
    cpu = measure_run_once(calls=args.requests, rounds=args.rounds)
    figures = [f"{path} {cpu[path]:.0f} µs" + ("" if path == "insert" else f" ({cpu[path] / cpu['insert']:.2f}x insert)")
               for path in RUN_ONCE_PATHS]
    print(f"{args.label} CPU per call in process, median of {args.rounds} rounds: {', '.join(figures)}".strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
