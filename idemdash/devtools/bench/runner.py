"""The bench run: seed, start gunicorn, run each scenario, report.

Every compared pair runs in alternating rounds in one run (see loadgen.compare), because
the machine is shared and noisy; each figure is a median over rounds, each ratio the median
of per-round ratios.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg
from django.conf import settings
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet

from idemdash.devtools import seeding
from idemdash.devtools.simulator import signed_stripe, stripe_event
from idemdash.devtools.bench import loadgen, servers
from idemdash.devtools.bench.models import BenchRow
from idemdash.devtools.bench.report import Figure, markdown_table, table, write_chart, write_json
from idemdash.core import rollup
from receipts.models import Attempt, Receipt

CLIENTS = 8


@dataclass(frozen=True)
class Sizes:
    rounds: int
    requests: int  # per variant per round
    time_limit: float  # seconds, per variant per round
    receipts: int
    events: int
    outbox: int
    purge_receipts: int
    page_samples: int  # timed requests per dashboard page
    purge_budget: float  # seconds the purge may run; the rate is over what it deleted
    latency_messages: int  # outbox messages enqueued one at a time for scenario 9
    # Receipts (three attempts each) seeded by set-based SQL (seeding.seed_receipts_sql)
    # instead of the bulk loader: the sizes of `--receipts 10000000`.
    sql_seed: bool = False


FULL = Sizes(rounds=5, requests=2000, time_limit=30, receipts=1_000_000, events=2_000_000,
             outbox=500_000, purge_receipts=1_000_000, page_samples=40, purge_budget=300,
             latency_messages=300)
QUICK = Sizes(rounds=2, requests=150, time_limit=8, receipts=5_000, events=5_000, outbox=2_000,
              purge_receipts=5_000, page_samples=5, purge_budget=120, latency_messages=40)


def at_scale(sizes: Sizes, receipts: int) -> Sizes:
    """The full sizes with `receipts` receipts seeded by SQL, a tenth of them expired (the
    purge's backlog); events and outbox messages are not topped up."""
    return dataclasses.replace(sizes, receipts=receipts, purge_receipts=receipts // 10, sql_seed=True,
                               events=0, outbox=0)


@dataclass
class Bench:
    sizes: Sizes
    base_url: str
    out_dir: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    details: dict[str, Any] = field(default_factory=dict)
    loads: list[tuple[int, float, str]] = field(default_factory=list)  # (rows, seconds, what) per bulk load
    running: dict[str, servers.Process] = field(default_factory=dict)  # "web", "qcluster", "web observed"

    @property
    def replay_keys(self) -> int:
        return min(500, self.sizes.requests)

    def cpu_probe(self) -> dict[str, dict[int, float]]:
        """CPU seconds used so far by each process of the web workers, the qcluster and
        PostgreSQL (this database's backends and the WAL writers)."""
        parts = {name: servers.cpu_by_pid([p.proc.pid, *p.children()]) for name, p in self.running.items()}
        parts["db"] = servers.cpu_by_pid(servers.database_pids())
        return parts

    def load(self, name: str, request: loadgen.Request, *, base_url: str | None = None, **kw: Any) -> loadgen.LoadResult:
        """One measured load against the bench's server, or the one at `base_url`."""
        kw.setdefault("max_requests", self.sizes.requests)
        kw.setdefault("time_limit", self.sizes.time_limit)
        kw.setdefault("cpu_probe", self.cpu_probe)
        result = loadgen.run_load(name, base_url or self.base_url, request, clients=CLIENTS, **kw)
        if result.errors:
            print(f"  ! {name}: {result.errors} errors, first: {result.first_error}", flush=True)
        return result

    def complete_keys(self, name: str, request: loadgen.Request) -> None:
        """The `replay_keys` first requests, every one answered: what the replays repeat."""
        done = self.load(name, request, max_requests=self.replay_keys, time_limit=120)
        if done.count != self.replay_keys:
            raise RuntimeError(f"{name} completed {done.count} of {self.replay_keys} keys")

    def compare(self, scenario: str, variants: dict[str, Callable[[int], loadgen.LoadResult]],
                *, chart: bool = True) -> loadgen.Comparison:
        """`variants` in alternating rounds; their rounds kept under `scenario` and, with
        `chart`, each one's medians among the chart's variants."""
        comparison = loadgen.compare(variants, self.sizes.rounds)
        self.details.setdefault("rounds", {})[scenario] = comparison.summary()
        for name in comparison.rounds[0] if chart else ():
            # Keyed by scenario too: the bare insert is the baseline of three scenarios.
            self.details.setdefault("variants", {})[f"{scenario.split()[0]}: {name}"] = {
                "throughput_rps": round(comparison.median(name, "throughput"), 1),
                "p50_ms": round(comparison.median(name, "p50"), 2),
                "p99_ms": round(comparison.median(name, "p99"), 2),
                "errors": sum(r[name].errors for r in comparison.rounds),
                "cpu_ms_per_request": {part: round(ms, 3) for part, ms in comparison.cpu_ms(name).items()},
            }
        return comparison


# The bare insert's route as the observer notes it (request.resolver_match.route).
BARE_ROUTE = "bench/insert/bare/"
PROTECTED = "/bench/insert/protected/"


def posting(path: str, key_prefix: str | None = None, keys: int | None = None, tag: str = "") -> loadgen.Request:
    """POSTs {"n": n} to `path`: under the Idempotency-Key `<key_prefix>-<n>` if given; with
    `keys`, n cycles through that many; with `tag` in the body, a body no other load sends."""
    def request(client: httpx.Client, n: int) -> httpx.Response:
        k = n % keys if keys else n
        headers = {"Idempotency-Key": f"{key_prefix}-{k}"} if key_prefix else {}
        return client.post(path, json={"n": k, "tag": tag} if tag else {"n": k}, headers=headers)
    return request


bare_insert = posting("/" + BARE_ROUTE)


def _replayed(response: httpx.Response) -> bool:
    return response.status_code == 201 and response.headers.get("Idempotent-Replayed") == "true"


S1, S2, S3, S4, S5, S6, S7, S8, S9, S10, S11, S12, S13, S14 = (
    "1 claim overhead", "2 replay", "3 claim API", "4 webhook ingest", "5 dashboard at scale",
    "6 purge", "7 memory", "8 DRF view", "9 outbox latency", "10 in-process run_once", "11 search at scale",
    "12 floor and ceiling", "13 past one table", "14 observer cost",
)


def compared_figures(scenario: str, comparison: loadgen.Comparison, prefix: str,
                     variants: dict[str, tuple[str, str]]) -> list[Figure]:
    """The usual figures of a comparison, each the median over the rounds: for `variants`
    (variant: id prefix, label) the throughput (id `<prefix>rps`), then each one's p50 and p99;
    then where every variant's CPU went, per request (id `<prefix>.cpu<i>`): the client, the
    web workers, the qcluster and PostgreSQL, all sharing the machine's cores (when they are
    saturated, throughput ratios follow these totals)."""
    figures = [
        *(Figure(f"{p}rps", scenario, f"{label} throughput", comparison.median(variant, "throughput"), "req/s")
          for variant, (p, label) in variants.items()),
        *(Figure(f"{p}{q}", scenario, f"{label} {q}", comparison.median(variant, q), "ms")
          for variant, (p, label) in variants.items() for q in ("p50", "p99")),
    ]
    for i, name in enumerate(comparison.rounds[0]):
        parts = comparison.cpu_ms(name)
        note = ", ".join(f"{part} {ms:.2f}" for part, ms in parts.items())
        figures.append(Figure(f"{prefix}.cpu{i}", scenario, f"CPU per request, {name}", sum(parts.values()),
                              "ms", note=note))
    return figures


def claim_overhead(b: Bench) -> list[Figure]:
    prefix = f"bench-{b.run_id}-fresh"
    bare, prot = "bare insert", "protected insert (fresh keys)"
    comparison = b.compare(S1, {
        bare: lambda r: b.load(bare, bare_insert),
        prot: lambda r: b.load(prot, posting(PROTECTED, f"{prefix}-{r}")),
    })
    return [
        Figure("claim.ratio", S1, "protected / unprotected throughput", comparison.ratio(prot, bare), "x", ">=", 0.8),
        *compared_figures(S1, comparison, "claim", {bare: ("claim.bare_", "unprotected"),
                                                    prot: ("claim.protected_", "protected")}),
    ]


def replay(b: Bench) -> list[Figure]:
    prefix = f"bench-{b.run_id}-replay"
    b.complete_keys("replay setup", posting(PROTECTED, prefix))
    bare, rep = "bare insert", "replay of completed keys"
    comparison = b.compare(S2, {
        bare: lambda r: b.load(bare, bare_insert),
        rep: lambda r: b.load(rep, posting(PROTECTED, prefix, b.replay_keys), ok=_replayed),
    })
    return [
        Figure("replay.ratio", S2, "replay / unprotected throughput", comparison.ratio(rep, bare), "x", ">=", 1.5),
        *compared_figures(S2, comparison, "replay", {rep: ("replay.", "replay")}),
    ]


# drf-idempotency 1.0 declares Django<5.3, so the `bench` extra installs only beside Django 5.2
# (docs/benchmarks.md); without it scenario 8 measures idemdash against the unprotected view alone.
HAS_DRF_IDEMPOTENCY = importlib.util.find_spec("drf_idempotency") is not None
DRF_LAYERS = {"idemdash": "/bench/drf/idemdash/"} | (
    {"drf-idempotency": "/bench/drf/drf-idempotency/"} if HAS_DRF_IDEMPOTENCY else {}
)


def drf_view(b: Bench) -> list[Figure]:
    """The same DRF view unprotected, under idemdash and under drf-idempotency: fresh keys,
    then replays of completed keys, each against the unprotected view in the same rounds."""
    bare, bare_again = "DRF unprotected", "DRF unprotected, replay rounds"
    unprotected = posting("/bench/drf/unprotected/")
    fresh = {bare: lambda r: b.load(bare, unprotected)}
    replays = {bare_again: lambda r: b.load(bare_again, unprotected)}
    for layer, path in DRF_LAYERS.items():
        prefix = f"bench-{b.run_id}-drf-{layer}"
        fresh[f"{layer} fresh"] = lambda r, name=f"{layer} fresh", path=path, prefix=prefix: b.load(
            name, posting(path, f"{prefix}-{r}"))
        b.complete_keys(f"{layer} replay setup", posting(path, f"{prefix}-replay"))
        replays[f"{layer} replay"] = lambda r, name=f"{layer} replay", path=path, prefix=prefix: b.load(
            name, posting(path, f"{prefix}-replay", b.replay_keys), ok=_replayed)
    runs = {"fresh": (b.compare(S8 + " fresh keys", fresh), bare, "fresh keys"),
            "replay": (b.compare(S8 + " replays", replays), bare_again, "replays")}
    figures = [Figure("drf.unprotected_rps", S8, "unprotected DRF view throughput",
                      runs["fresh"][0].median(bare, "throughput"), "req/s")]
    for layer in DRF_LAYERS:
        for what, (comparison, baseline, words) in runs.items():
            variant = f"{layer} {what}"
            figures += [
                Figure(f"drf.{layer}.{what}_ratio", S8, f"{layer}, {words} / unprotected throughput",
                       comparison.ratio(variant, baseline), "x"),
                Figure(f"drf.{layer}.{what}_rps", S8, f"{layer}, {words} throughput",
                       comparison.median(variant, "throughput"), "req/s"),
            ]
        figures.append(Figure(f"drf.{layer}.fresh_p99", S8, f"{layer}, fresh keys p99",
                              runs["fresh"][0].median(f"{layer} fresh", "p99"), "ms"))
    print("  DRF view, throughput against the unprotected view: " + "; ".join(
        f"{f.label.split(' / ')[0]} {f.value:.2f}x" for f in figures if f.id.endswith("_ratio")), flush=True)
    return figures


def api_roundtrip(token: str, prefix: str) -> loadgen.Request:
    """Claim a fresh key, then complete it with the token the claim returned."""
    headers = {"Authorization": f"Bearer {token}"}

    def request(client: httpx.Client, n: int) -> httpx.Response:
        key = f"{prefix}-{n}"
        claimed = client.post("/api/v1/receipts/claim", headers=headers,
                              json={"key": key, "operation": "bench.api", "request": {"n": n}})
        if claimed.status_code != 201:
            return claimed
        return client.post("/api/v1/receipts/complete", headers=headers,
                           json={"key": key, "token": claimed.json()["token"], "response": {"ok": True}})
    return request


def claim_api(b: Bench) -> list[Figure]:
    from idemdash.core.clients import create_token

    _, token = create_token(f"bench-{b.run_id}")
    connection.close()
    name = "API claim + complete"
    comparison = b.compare(S3, {name: lambda r: b.load(name, api_roundtrip(token, f"bench-{b.run_id}-api-{r}"))})
    return [
        Figure("api.roundtrips", S3, "claim + complete round trips", comparison.median(name, "throughput"), "/s"),
        Figure("api.p50", S3, "round trip p50", comparison.median(name, "p50"), "ms"),
        Figure("api.p99", S3, "round trip p99", comparison.median(name, "p99"), "ms"),
    ]


def inprocess_run_once(b: Bench) -> list[Figure]:
    """receipts.run_once in this process beside the ORM insert it wraps: CPU per call, medians
    over the rounds (idemdash/devtools/bench/cputime.py:measure_run_once)."""
    from idemdash.devtools.bench.cputime import measure_run_once

    cpu = measure_run_once(calls=b.sizes.requests // 2, rounds=b.sizes.rounds)
    connection.close()  # gunicorn's workers need no connection of ours beside theirs
    return [
        Figure("run_once.insert_us", S10, "ORM insert alone, CPU per call", cpu["insert"], "µs"),
        Figure("run_once.ratio", S10, "run_once, fresh key, CPU per call / insert", cpu["run_once"] / cpu["insert"], "x"),
        Figure("run_once.replay_ratio", S10, "run_once replay, CPU per call / insert",
               cpu["run_once_replay"] / cpu["insert"], "x"),
    ]


def floor_and_ceiling(b: Bench) -> list[Figure]:
    """Fresh keys beside the bare insert and the floor (views.insert_floor), then replays
    beside the bare insert and the replay ceiling (views.replay_ceiling), in alternating
    rounds: how far the protection is from the least any protection could cost."""
    prefix = f"bench-{b.run_id}-floor"
    bare, protected = "bare insert", "protected (fresh keys)"
    floor = "floor (a transaction, two trivial statements)"
    fresh = b.compare(S12, {
        bare: lambda r: b.load(bare, bare_insert),
        protected: lambda r: b.load(protected, posting(PROTECTED, f"{prefix}-fresh-{r}")),
        floor: lambda r: b.load(floor, posting("/bench/insert/floor/")),
    })
    b.complete_keys("replay setup", posting(PROTECTED, f"{prefix}-replay"))
    bare_again, replay = "bare insert, replay rounds", "replay"
    ceiling = "replay ceiling (one trivial statement, no view)"
    replays = b.compare(f"{S12} (replay)", {
        bare_again: lambda r: b.load(bare_again, bare_insert),
        ceiling: lambda r: b.load(ceiling, posting("/bench/replay/ceiling/", "ceiling"), ok=_replayed),
        replay: lambda r: b.load(replay, posting(PROTECTED, f"{prefix}-replay", b.replay_keys), ok=_replayed),
    }, chart=False)
    return [
        Figure("floor.vs_floor", S12, "protected / floor, fresh keys", fresh.ratio(protected, floor), "x", ">=", 0.8),
        Figure("floor.protected_ratio", S12, "protected / bare, fresh keys", fresh.ratio(protected, bare), "x"),
        Figure("floor.floor_ratio", S12, "floor / bare", fresh.ratio(floor, bare), "x"),
        Figure("floor.vs_ceiling", S12, "replay / replay ceiling", replays.ratio(replay, ceiling), "x", ">=", 0.95),
        Figure("floor.replay_ratio", S12, "replay / bare", replays.ratio(replay, bare_again), "x"),
        Figure("floor.ceiling_ratio", S12, "replay ceiling / bare", replays.ratio(ceiling, bare_again), "x"),
        *compared_figures(S12, fresh, "floor", {bare: ("floor.bare_", "bare"), protected: ("floor.protected_", "protected"),
                                                floor: ("floor.floor_", "floor")}),
    ]


OBSERVED_SETTINGS = "idemdash.devtools.bench.observed_settings"


def observer_cost(b: Bench) -> list[Figure]:
    """The bare insert, every body distinct, on the bench's server and on a second gunicorn
    that keeps the observer of unprotected routes (receipts/observe.py), in alternating
    rounds; then the observed server's notes, read as the Coverage page reads them, so that
    the ratio is not of an observer that noted nothing."""
    from receipts import coverage
    from receipts.conf import setting

    port = servers.free_port()
    observed_url = f"http://127.0.0.1:{port}"
    web = b.running["web observed"] = servers.start_gunicorn(port, b.out_dir, name="gunicorn-observed",
                                                             settings_module=OBSERVED_SETTINGS)
    bare, observed = "bare insert", "bare insert, observed"
    prefix = f"bench-{b.run_id}-observe"
    try:
        b.load("warm-up observed", posting("/" + BARE_ROUTE, tag=f"{prefix}-warm"), base_url=observed_url,
               max_requests=100, time_limit=30)
        since = datetime.now(dt_timezone.utc)
        comparison = b.compare(S14, {
            bare: lambda r: b.load(bare, posting("/" + BARE_ROUTE, tag=f"{prefix}-bare-{r}")),
            observed: lambda r: b.load(observed, posting("/" + BARE_ROUTE, tag=f"{prefix}-{r}"), base_url=observed_url),
        })
        answered = sum(sum(r[observed].statuses.values()) for r in comparison.rounds)
        # Each worker's flusher writes its buffer every RECEIPTS_OBSERVE_FLUSH_SECONDS; a stopped
        # worker's last buffer is lost, so the notes are counted before the server stops.
        noted = polled(lambda: coverage.unprotected_counts(since).get(("POST", BARE_ROUTE),
                                                                      {"requests": 0, "duplicates": 0}),
                       lambda noted: noted["requests"] >= answered, 3 * setting("RECEIPTS_OBSERVE_FLUSH_SECONDS") + 10)
        connection.close()
    finally:
        del b.running["web observed"]
        web.stop()
    b.details["observer"] = {"answered": answered, **noted}
    return [
        Figure("observe.ratio", S14, "observed / bare throughput, unprotected insert", comparison.ratio(observed, bare),
               "x", ">=", 0.95, note=f"the observer's budget: at most 5% of a bare request's throughput (issue 32); "
               f"median of {b.sizes.rounds} per-round ratios"),
        Figure("observe.notes", S14, "notes the observed server wrote", noted["requests"], "notes", ">=", answered,
               note=f"one per request it answered ({answered})"),
        Figure("observe.duplicates", S14, "would-be duplicates among them (every body distinct)", noted["duplicates"],
               "notes", "<=", 0),
        *compared_figures(S14, comparison, "observe", {bare: ("observe.bare_", "bare"),
                                                       observed: ("observe.observed_", "observed")}),
    ]


# 100M new receipts a day, on average (docs/architecture.md, "Past one table").
DAILY_TARGET_PER_S = 100_000_000 / 86_400


def past_one_table(b: Bench) -> list[Figure]:
    """The partitioned prototype (idemdash/devtools/bench/partitioned.py) beside the product's
    claim: CLIENTS processes claim fresh keys through receipts.store.claim, through the
    prototype's statement on unpartitioned twins of its tables, and on the partitioned
    tables, in alternating rounds; then a day removed by DELETE and by dropping partitions."""
    from idemdash.devtools.bench import partitioned

    conninfo = partitioned.conninfo_from_django(connection.settings_dict)
    today = datetime.now(dt_timezone.utc).date()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        partitioned.create(conn, today)
    labels = {"product": "product claim (receipts table)", "single": "prototype, unpartitioned",
              "partitioned": "prototype, partitioned"}
    racers = partitioned.Racers(conninfo, CLIENTS)
    try:
        racers.run("product", [[f"{b.run_id}-warm-{p}-{n}" for n in range(20)] for p in range(CLIENTS)], 60)

        def claims(variant: str, r: int) -> loadgen.LoadResult:  # every claim takes a fresh key
            keys = [[f"{b.run_id}-{variant}-{r}-{p}-{n}" for n in range(b.sizes.requests // 2)] for p in range(CLIENTS)]
            return racers.run(variant, keys, b.sizes.time_limit)

        comparison = b.compare(S13, {label: lambda r, v=v: claims(v, r) for v, label in labels.items()})
    finally:
        racers.close()
    with psycopg.connect(conninfo, autocommit=True) as conn:
        retention = partitioned.measure_retention(conn, partitioned.days_back(today)[-1], b.sizes.purge_receipts)
    b.details[f"{S13} retention"] = retention

    def median(variant: str, what: str) -> float:
        return comparison.median(labels[variant], what)

    def ratio(variant: str, over: str) -> float:
        return comparison.ratio(labels[variant], labels[over])

    return [
        Figure("partition.vs_single", S13, "partitioned / unpartitioned claims per second",
               ratio("partitioned", "single"), "x", ">=", 0.8),
        Figure("partition.vs_product", S13, "partitioned prototype / product claims per second",
               ratio("partitioned", "product"), "x"),
        *(Figure(f"partition.{v}_cps", S13, f"{label}, claims/s at {CLIENTS} processes", median(v, "throughput"),
                 "/s") for v, label in labels.items()),
        *(Figure(f"partition.{v}_{p}", S13, f"{label} {p}", median(v, p), "ms")
          for v, label in labels.items() for p in ("p50", "p99")),
        Figure("partition.headroom", S13, "partitioned claims/s / 100M a day (1,157/s)",
               median("partitioned", "throughput") / DAILY_TARGET_PER_S, "x",
               note="one primary, this machine; peaks run 5-10x the average"),
        Figure("partition.delete_s", S13, f"DELETE of a day ({retention['rows']} attempts + bodies)",
               retention["delete_s"], "s"),
        Figure("partition.drop_s", S13, "DETACH + DROP of the same day's partitions", retention["drop_s"], "s"),
        Figure("partition.drop_ratio", S13, "DELETE / DROP time", retention["delete_s"] / retention["drop_s"], "x"),
        Figure("partition.claims_purge_rps", S13, "expired claims purged by DELETE, rows/s",
               retention["claims_purged"] / retention["claims_delete_s"], "rows/s"),
    ]


BENCH_ENDPOINT = "bench-stripe"


def webhook_endpoint(slug: str = BENCH_ENDPOINT, description: str = "make bench") -> str:
    """A Stripe endpoint of the bench's (or the soak's) own; returns its signing secret."""
    return seeding.endpoint_secret(slug, "stripe", description).secret


def stripe_delivery(secret: str, event_id: str, event_type: str, **intent: Any) -> tuple[bytes, dict[str, str]]:
    """An event about a payment intent (its fields `intent`), signed as Stripe signs it."""
    intent = {"id": f"pi_{event_id}", "object": "payment_intent", **intent}
    return signed_stripe(stripe_event(intent, event_type, event_id=event_id), secret)


def payment_delivery(secret: str, event_id: str, n: int) -> tuple[bytes, dict[str, str]]:
    return stripe_delivery(secret, event_id, "payment_intent.succeeded", amount=1000 + n, currency="eur",
                           status="succeeded")


def webhook_request(secret: str, prefix: str, keys: int | None = None) -> loadgen.Request:
    def request(client: httpx.Client, n: int) -> httpx.Response:
        k = n % keys if keys else n
        body, headers = payment_delivery(secret, f"evt_{prefix}_{k}", k)
        return client.post(f"/webhooks/{BENCH_ENDPOINT}/", content=body, headers=headers)
    return request


def _duplicate(response: httpx.Response) -> bool:
    return response.status_code == 200 and b'"duplicate": true' in response.content


def webhook_ingest(b: Bench) -> list[Figure]:
    secret = webhook_endpoint()
    connection.close()
    dup_prefix = f"bench{b.run_id}dup"
    b.complete_keys("webhook setup", webhook_request(secret, dup_prefix))
    bare, new, dup = "bare insert", "signed delivery, new event", "signed delivery, duplicate"
    with autovacuum_stand_in(QUEUE_TABLES) as vacuumed:
        comparison = b.compare(S4, {
            bare: lambda r: b.load(bare, bare_insert),
            new: lambda r: b.load(new, webhook_request(secret, f"bench{b.run_id}new{r}")),
            dup: lambda r: b.load(dup, webhook_request(secret, dup_prefix, b.replay_keys), ok=_duplicate),
        })
    return [
        Figure("webhook.new_ratio", S4, "new deliveries / bare insert throughput", comparison.ratio(new, bare), "x", ">=", 0.7,
               note="; ".join(vacuumed)),
        Figure("webhook.dup_ratio", S4, "duplicate deliveries / bare insert throughput", comparison.ratio(dup, bare), "x", ">=", 0.7),
        Figure("webhook.new_rps", S4, "new deliveries throughput", comparison.median(new, "throughput"), "req/s"),
        Figure("webhook.dup_rps", S4, "duplicate deliveries throughput", comparison.median(dup, "throughput"), "req/s"),
        Figure("webhook.new_p99", S4, "new deliveries p99", comparison.median(new, "p99"), "ms", "<=", 50),
        Figure("webhook.dup_p99", S4, "duplicate deliveries p99", comparison.median(dup, "p99"), "ms", "<=", 50),
        *compared_figures(S4, comparison, "webhook", {}),
    ]


# (figure id, url, label, target) of each timed page; "{receipt}" is a seeded receipt with a long timeline.
DASHBOARD_PAGES = [
    ("dashboard.overview", "/", "overview p95", "<=", 300),
    ("dashboard.filtered", "/receipts/?status=failed&operation=payment.create", "filtered receipts page p95", "<=", 150),
    ("dashboard.detail", "/receipts/{receipt}/", "receipt detail p95", "<=", 50),
    ("dashboard.stats", "/api/v1/stats", "stats endpoint p95", None, None),
    # Informational: the widest window, whose figures and charts read the most roll-up hours.
    ("dashboard.overview_30d", "/?window=30d", "overview p95, 30d window", None, None),
]


def bench_client() -> Any:
    """A Django test Client logged in as the bench's superuser, for the dashboard's pages:
    in-process, and through its session cookie over HTTP."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    User = get_user_model()
    user = User.objects.filter(username="bench-admin").first() or User.objects.create_superuser(
        "bench-admin", "bench@localhost", uuid.uuid4().hex
    )
    client = Client()
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    return client


def busy_receipt() -> int:
    """A seeded receipt with replays: a detail page with a timeline to draw."""
    # Taken from the receipts' side: an attempt keeps the id of a receipt that the purge
    # scenario has since deleted.
    replayed = Exists(Attempt.objects.filter(receipt=OuterRef("pk"), outcome="replayed"))
    newest_first = seeding.seeded_receipts().order_by("-id").values_list("id", flat=True)
    return newest_first.filter(replayed).first() or newest_first[0]


def time_pages(b: Bench, detail: str, pages: dict[str, str | list[str]], plans: str,
               samples: int | None = None) -> dict[str, loadgen.LoadResult]:
    """One client logged in, pages in turn (interleaved, so noise hits each alike), every
    sample timed; then each page's queries explained (explain_pages) into `plans` under the
    out dir. A page given as a list of URLs is a different one of them at each sample (the
    search's ids: one id asked for again would measure the database's cache). The timings
    are kept in details[detail], the plans' summary in details[detail + "_explain"]."""
    logged_in = bench_client()
    session_key = logged_in.cookies[settings.SESSION_COOKIE_NAME].value
    connection.close()  # the servers need no connection of ours meanwhile
    urls = {page: [url] if isinstance(url, str) else url for page, url in pages.items()}
    results = {page: loadgen.LoadResult(page) for page in pages}
    with httpx.Client(base_url=b.base_url, cookies={"sessionid": session_key}, timeout=60) as client:
        for some in urls.values():  # a first, untimed visit: worker caches, template loading
            client.get(some[-1])
        for i in range(samples or b.sizes.page_samples):
            for page, some in urls.items():
                started = time.perf_counter()
                response = client.get(some[i % len(some)])
                took = time.perf_counter() - started
                if response.status_code == 200:
                    results[page].latencies.append(took)
                else:
                    results[page].errors += 1
                results[page].elapsed += took
    b.details[detail] = {page: r.summary() for page, r in results.items()}
    b.details[f"{detail}_explain"] = explain_pages(logged_in, {page: some[0] for page, some in urls.items()},
                                                   b.out_dir / plans)
    return results


def page_figures(scenario: str, results: dict[str, loadgen.LoadResult], pages: list[tuple],
                 note: Callable[[loadgen.LoadResult], str]) -> list[Figure]:
    """Each page's p95 against its target (pages: id, url, label, op, bound)."""
    figures = []
    for fid, _, label, op, bound in pages:
        r = results[fid]
        text = f"{r.errors} of {r.errors + r.count} requests failed" if r.errors else note(r) if r.count else ""
        figures.append(Figure(fid, scenario, label, r.percentile(95) if r.count else None, "ms", op, bound, note=text))
    return figures


def explain_pages(client: Any, pages: dict[str, str], out: Path) -> dict[str, Any]:
    """Run each page in-process with `client`, capture its queries and EXPLAIN (ANALYZE,
    BUFFERS) each; write the plans to `out` and return, per page, its query count and its
    slowest plans."""
    from django.test.utils import CaptureQueriesContext

    summary: dict[str, Any] = {}
    lines: list[str] = []
    for page, url in pages.items():
        with CaptureQueriesContext(connection) as captured:
            client.get(url)
        plans = []
        for query in captured.captured_queries:
            sql = query["sql"]
            if not sql.lstrip().upper().startswith(("SELECT", "WITH")) or "django_session" in sql:
                continue
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            ms = float(plan.rsplit("Execution Time: ", 1)[1].split()[0]) if "Execution Time: " in plan else 0.0
            seq = sorted({line.split("Seq Scan on ")[1].split()[0] for line in plan.splitlines() if "Seq Scan on " in line})
            plans.append({"ms": ms, "seq_scans": seq, "sql": sql[:300]})
            lines += [f"=== {page} {url}: {ms:.1f} ms", sql, plan, ""]
        plans.sort(key=lambda p: -p["ms"])
        summary[page] = {"url": url, "queries": len(captured.captured_queries),
                         "explained_ms_total": round(sum(p["ms"] for p in plans), 1), "slowest": plans[:3]}
    out.write_text("\n".join(lines))
    return summary


def dashboard(b: Bench) -> list[Figure]:
    info = b.details.get("seed", {})
    seeded = Figure("seed.receipts", S5, "receipts in the log", info.get("total_receipts"), "rows",
                    note=f"attempts: {info.get('total_attempts')}; seeded rows present before the run: {info.get('had')}")
    pages = {page: url.format(receipt=busy_receipt()) for page, url, *_ in DASHBOARD_PAGES}
    # What the every-minute receipts.rollup schedule would have done by now (the bench
    # removes the schedules, whose purge would race scenario 6): roll scenarios 1 to 4's
    # attempts up to five minutes ago, as in a deployment.
    rollup.catch_up()
    if not _autovacuum_is_on():
        # Without autovacuum no visibility map is set, so the dashboard's index-only scans would
        # visit the heap for every row the scenarios or an earlier purge touched.
        seeding.vacuum_analyze(DASHBOARD_TABLES)
        seeded.note += f"; autovacuum is off on this server, so the bench vacuumed {', '.join(DASHBOARD_TABLES)} first"
    results = time_pages(b, "dashboard", pages, "explain-latest.txt")
    return [seeded, *page_figures(S5, results, DASHBOARD_PAGES, lambda r: "")]


SEARCH_PAGES = [
    ("search.order", "", "search for an order id p95 (its receipt, events and message)", "<=", 300),
    ("search.miss", "", "search for an id that is nowhere p95", "<=", 300),
    ("search.trace", "", "trace of an order id p95", "<=", 300),
    # Informational: a value in most payloads ("eur"): the search stops at its limit per kind.
    ("search.common", "/search/?q=eur", "search for a value in most rows p95", None, None),
]


def search_samples(n: int) -> list[str]:
    """Order ids of `n` seeded receipts spread over the table (seeding.order_id: receipt i's
    request, event i's payload and message i's payload carry the same one)."""
    from django.db.models import Max

    top = Receipt.objects.aggregate(m=Max("id"))["m"] or 0
    found: list[str] = []
    rng = random.Random(11)
    with connection.cursor() as cursor:
        for _ in range(n * 20):
            if len(found) >= n:
                break
            cursor.execute("SELECT request->>'order' FROM receipts_receipt WHERE id >= %s AND request ? 'order' "
                           "ORDER BY id LIMIT 1", [rng.randrange(top + 1)])
            row = cursor.fetchone()
            if row and row[0] and row[0] not in found:
                found.append(row[0])
    if not found:
        raise RuntimeError("no seeded receipt carries an order id: seed again (idemdash.devtools.seeding.order_id)")
    return found


def search_at_scale(b: Bench) -> list[Figure]:
    """The search (/search/?q=) and trace (/trace/?q=) pages over the seeded log: a different
    order id at each sample, found in its receipt, events and message through the GIN indexes
    (idemdash/dashboard/search.py), an id found nowhere, and a value in most rows."""
    from urllib.parse import quote

    from webhooks.models import WebhookEvent

    samples = b.sizes.page_samples * 5
    orders = search_samples(samples * 2)
    pages: dict[str, str | list[str]] = {
        "search.order": [f"/search/?q={quote(o)}" for o in orders[:samples]],
        "search.miss": [f"/search/?q=ord_missing_{b.run_id}_{i}" for i in range(samples)],
        "search.trace": [f"/trace/?q={quote(o)}" for o in orders[samples:] or orders],
        "search.common": SEARCH_PAGES[-1][1],
    }
    results = time_pages(b, "search", pages, "explain-search.txt", samples=samples)
    sizes = f"{Receipt.objects.count()} receipts, {WebhookEvent.objects.count()} events"
    connection.close()
    return page_figures(S11, results, SEARCH_PAGES, lambda r: f"p50 {r.percentile(50):.1f} ms over {r.count} ids; {sizes}")


def purge(b: Bench) -> list[Figure]:
    from django.utils import timezone

    # Topped up to the size, like the dashboard's rows: a purge cut short by its time
    # budget leaves a backlog that the next run purges first.
    have = seeding.seeded_receipts().filter(expires_at__lt=timezone.now()).count()
    n = max(0, b.sizes.purge_receipts - have)
    print(f"  {have} expired receipts present; seeding {n} more", flush=True)
    if n:
        started = time.monotonic()
        with seeding.progress_bars(sys.stderr, "  seed ") as progress:
            counts = seeding.seed(receipts=n, expired_only=True, batch=10_000, progress=progress)
        b.loads.append((counts.receipts + counts.attempts, time.monotonic() - started, f"{n} expired receipts"))
    connection.close()
    prefix = f"bench-{b.run_id}-purge"
    slice_s = 1.0 if b.sizes is QUICK else 3.0
    rounds: list[dict[str, Any]] = []

    def claims(phase: str) -> loadgen.LoadResult:
        result = b.load(f"claims {phase}", posting(PROTECTED, f"{prefix}-{len(rounds)}"), max_requests=10**9,
                        time_limit=slice_s)
        rounds.append({"phase": phase, **result.summary()})
        return result

    for _ in range(b.sizes.rounds):
        claims("before")
    purger = subprocess.Popen([sys.executable, "-m", "idemdash.devtools.bench.purge", "--budget", str(b.sizes.purge_budget)],
                              cwd=settings.BASE_DIR,
                              env=servers.server_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30 * 60
    while purger.poll() is None and time.monotonic() < deadline:
        claims("during")
        if purger.poll() is not None:
            rounds[-1]["phase"] = "overlapping the end"  # not wholly during the purge
    if purger.poll() is None:
        purger.kill()
        raise RuntimeError("the purge ran for more than 30 minutes")
    out, err = purger.communicate()
    if purger.returncode != 0:
        raise RuntimeError(f"purge failed: {err[-2000:]}")
    for _ in range(b.sizes.rounds):
        claims("after")
    # The purge keeps attempts (their own 35-day retention): without this every full run would
    # leave another ~2.8M rows in the log, and the next run's dashboard would measure a bigger one.
    delete_attempts(Attempt.objects.filter(key__startswith=seeding.PREFIX).exclude(
        Exists(Receipt.objects.filter(pk=OuterRef("receipt_id")))))
    connection.close()
    done = json.loads(out)
    b.details["purge"] = {**done, "claim_rounds": rounds}
    without = statistics.median(r["p99_ms"] for r in rounds if r["phase"] in ("before", "after"))
    during_rounds = [r["p99_ms"] for r in rounds if r["phase"] == "during"]
    note = ""
    if not during_rounds:  # a small purge on a fast machine can end inside the first slice
        during_rounds = [r["p99_ms"] for r in rounds if r["phase"] == "overlapping the end"]
        note = "the purge ended within one claim slice: 'during' is that slice, which overlapped it"
    during = statistics.median(during_rounds)
    return [
        Figure("purge.rows_per_s", S6, "purge rate, expired receipts", done["deleted"] / done["seconds"], "rows/s",
               ">=", 20_000, note=f"{done['deleted']} rows ({done['archived']} archived) in {done['seconds']:.1f} s, "
                                 f"batches of {done['batch_size']}" + ("" if done["finished"] else
                                 f"; stopped by the {b.sizes.purge_budget:.0f} s budget with rows still due")),
        Figure("purge.claim_p99_ratio", S6, "claim p99 during purge / without",
               during / without if during and without else None, "x", "<=", 2, note=note),
        Figure("purge.claim_p99_during", S6, "claim p99 during purge", during, "ms"),
        Figure("purge.claim_p99_without", S6, "claim p99 without purge", without, "ms"),
    ]


def delete_attempts(attempts: QuerySet) -> None:
    """Delete attempts in one statement, and recount the hours they were rolled up in."""
    from django.db.models import Min

    earliest = attempts.aggregate(t=Min("created_at"))["t"]
    attempts._raw_delete(attempts.db)
    if earliest is not None:
        seeding.recount(earliest)


DASHBOARD_TABLES = ["receipts_receipt", "receipts_attempt", "webhooks_webhookevent", "webhooks_webhookdelivery",
                    "outbox_outboxmessage", "outbox_outboxattempt"]
# django-q2's queue: every new event adds a row and the cluster deletes it, and every poll
# of the cluster reads the table whole (it has no index but its key).
QUEUE_TABLES = ("django_q_ormq",)
# PostgreSQL's autovacuum_naptime default: how often autovacuum looks at a busy table.
AUTOVACUUM_NAPTIME = 60.0


def _autovacuum_is_on() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        return cursor.fetchone()[0] == "on"


@contextlib.contextmanager
def autovacuum_stand_in(tables: tuple[str, ...]) -> Iterator[list[str]]:
    """On a server with autovacuum off, vacuum `tables` now and then every naptime while the
    block runs, as autovacuum would: without it a queue table only ever grows, and the
    cluster's polls, which read it whole, with it. Yields a list that holds, after the
    block, a note saying so (empty if autovacuum is on)."""
    note: list[str] = []
    if _autovacuum_is_on():
        yield note
        return
    stop = threading.Event()
    runs: list[float] = []

    def vacuum() -> None:
        try:
            while True:
                started = time.monotonic()
                with connection.cursor() as cursor:
                    for name in tables:
                        cursor.execute(f"VACUUM {connection.ops.quote_name(name)}")
                runs.append(time.monotonic() - started)
                if stop.wait(AUTOVACUUM_NAPTIME):
                    return
        finally:
            connection.close()

    worker = threading.Thread(target=vacuum, name="autovacuum-stand-in", daemon=True)
    worker.start()
    try:
        yield note
    finally:
        stop.set()
        worker.join()
        connection.close()
        note.append(f"autovacuum is off on this server, so the bench vacuumed {', '.join(tables)} "
                    f"at the start and every {AUTOVACUUM_NAPTIME:.0f} s ({len(runs)} times), as autovacuum would")


def seed_to_size(b: Bench, *, always: bool) -> dict[str, Any]:
    """Top the seeded rows up to the run's sizes, so a second full run reuses the first
    one's million rows; with `always` (quick mode, small sizes) seed the sizes anew."""
    have = {"receipts": seeding.seeded_receipts().count(), "events": seeding.seeded_events().count(),
            "outbox": seeding.seeded_outbox().count()}
    want = {"receipts": b.sizes.receipts, "events": b.sizes.events, "outbox": b.sizes.outbox}
    missing = {k: want[k] if always else max(0, want[k] - have[k]) for k in want}
    sql_receipts = missing.pop("receipts") if b.sizes.sql_seed else 0
    started = time.monotonic()
    with seeding.progress_bars(sys.stderr, "  seed ") as progress:
        counts = seeding.seed(**missing, batch=10_000, progress=progress)
        if sql_receipts:
            sql_counts = seeding.seed_receipts_sql(sql_receipts, progress=progress)
            counts.receipts, counts.attempts = sql_counts.receipts, sql_counts.attempts
            missing["receipts"] = sql_receipts
    took = time.monotonic() - started
    info = {"had": have, "added": missing, "seconds": round(took, 1),
            "rows_written": counts.__dict__, "total_receipts": Receipt.objects.count(),
            "total_attempts": Attempt.objects.count()}
    b.details["seed"] = info
    if sum(missing.values()):
        b.loads.append((sum(counts.__dict__.values()), took, f"{missing} (with their child rows)"))
    return info


def loader_figure(b: Bench) -> Figure:
    """The bulk loader's rate, from the largest load of this run (the dashboard's seed, or
    the purge's expired receipts when the dashboard's was reused from an earlier run)."""
    if not b.loads:
        return Figure("seed.rows_per_s", S5, "bulk loader rate, all tables", None, "rows/s",
                      note="nothing was loaded in this run (seeded rows reused)")
    rows, took, what = max(b.loads)
    return Figure("seed.rows_per_s", S5, "bulk loader rate, all tables", rows / took, "rows/s",
                  note=f"{rows} rows in {took:.0f} s: {what}")


OUTBOX_LATENCY_SPACING = 0.05  # seconds between enqueues: traffic, not one burst


def outbox_latency(b: Bench) -> list[Figure]:
    """Enqueue to first attempt, with the worker running and no schedule installed: each
    message is sent by the task its commit enqueues (receipts.outbox.store.send_soon)."""
    from django_q.models import OrmQ

    from receipts.outbox import store
    from receipts.outbox.models import OutboxAttempt, OutboxMessage

    # Tasks left by scenario 4 (its webhook events) would measure that backlog instead.
    polled(OrmQ.objects.exists, lambda busy: not busy, 300)
    prefix = f"bench-{b.run_id}-latency"
    for n in range(b.sizes.latency_messages):
        store.enqueue("bench.noop", {"n": n}, f"{prefix}-{n}", scope="bench")
        time.sleep(OUTBOX_LATENCY_SPACING)
    messages = dict(OutboxMessage.objects.filter(scope="bench", key__startswith=prefix).values_list("id", "created_at"))
    attempts = OutboxAttempt.objects.filter(message_id__in=messages, number=1).values_list("message_id", "created_at")
    first: dict[int, datetime] = polled(lambda: dict(attempts.all()), lambda first: len(first) >= len(messages), 120)
    connection.close()
    waits = [(first[pk] - created).total_seconds() for pk, created in messages.items() if pk in first]
    note = f"{len(messages) - len(waits)} of {len(messages)} messages had no attempt within 120 s" if len(waits) < len(messages) else ""
    note = note or f"{len(waits)} messages, one every {OUTBOX_LATENCY_SPACING * 1000:.0f} ms"
    b.details["outbox_latency"] = {"messages": len(messages), "attempted": len(waits)}
    p50, p99 = (loadgen.percentile_ms(waits, p) / 1000 if waits else None for p in (50, 99))
    return [
        Figure("outbox.latency_p50", S9, "enqueue to first attempt p50", p50, "s", "<=", 1, note=note),
        Figure("outbox.latency_p99", S9, "enqueue to first attempt p99", p99, "s", "<=", 5),
    ]


def memory_figures(b: Bench, web: servers.Process, cluster: servers.Process | None) -> list[Figure]:
    def peaks(process: servers.Process) -> list[float]:
        return [p for p in (servers.peak_rss_mb(pid) for pid in process.children()) if p]

    memory = b.details["memory"] = {"gunicorn_workers_mb": peaks(web)}
    label = "peak RSS, qcluster process (max)"
    figures = [Figure("memory.web_worker", S7, "peak RSS, gunicorn worker (max)",
                      max(memory["gunicorn_workers_mb"], default=None), "MiB")]
    if cluster is not None and cluster.alive():
        memory["qcluster_processes_mb"] = peaks(cluster)
        figures.append(Figure("memory.qcluster_worker", S7, label, max(memory["qcluster_processes_mb"], default=None),
                              "MiB"))
    else:
        figures.append(Figure("memory.qcluster_worker", S7, label, None, "MiB",
                              note="qcluster did not run" + (f": {cluster.tail(300)}" if cluster else "")))
    return figures


def reset_bench_rows() -> None:
    """Start each run from the same bench tables: the rows earlier runs' requests made."""
    from idemdash.core.models import ApiClient

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {BenchRow._meta.db_table}")
    for scope in (Q(scope="bench"), Q(scope="bench-drf"), Q(scope__startswith="client:bench-")):
        delete_attempts(Attempt.objects.filter(scope))
        Receipt.objects.filter(scope)._raw_delete(Receipt.objects.db)
    ApiClient.objects.filter(name__startswith="bench-").delete()
    # Scenario 8's other layer keeps its records in its own table.
    if HAS_DRF_IDEMPOTENCY:
        from drf_idempotency.models import IdempotencyRecord

        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {IdempotencyRecord._meta.db_table}")


def warm_up(b: Bench) -> None:
    b.load("warm-up bare", bare_insert, max_requests=100, time_limit=30)
    b.load("warm-up protected", posting(PROTECTED, f"bench-{b.run_id}-warm"), max_requests=100, time_limit=30)


def meta(quick: bool, started: datetime) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
                       "current_setting('autovacuum')")
        pg, sync_commit, autovacuum = cursor.fetchone()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=settings.BASE_DIR,
                                capture_output=True, text=True, timeout=5).stdout.strip()
    except OSError:
        commit = ""
    return {
        "mode": "quick" if quick else "full", "started_at": started.strftime("%Y-%m-%d %H:%M UTC"),
        "cores": os.cpu_count(), "load_average_at_start": os.getloadavg(), "python": platform.python_version(),
        "postgresql": pg, "synchronous_commit": sync_commit, "autovacuum": autovacuum, "gunicorn_workers": servers.GUNICORN_WORKERS, "worker_class": "sync",
        "clients": CLIENTS, "commit": commit,
    }


# The scenarios that read no seeded row: 13 its own tables, 14 the bench row's.
UNSEEDED = {13, 14}


def run(*, quick: bool, port: int | None, out_dir: Path, only: set[int] | None = None,
        receipts: int | None = None) -> int:
    """Every scenario, or with `only` the numbered ones (for iterating on one figure; such a
    run does not replace latest.*, which keeps the last complete run). `receipts` seeds the
    log to that size by SQL (at_scale)."""
    from django.core.management import call_command
    from django_q.models import Schedule

    sizes = QUICK if quick else FULL
    if receipts:
        sizes = at_scale(sizes, receipts)
    started = datetime.now(dt_timezone.utc)
    out_dir.mkdir(parents=True, exist_ok=True)
    print(f"bench ({'quick' if quick else 'full'}): migrating {connection.settings_dict['NAME']}", flush=True)
    call_command("migrate", verbosity=0, interactive=False)
    # migrate installs the schedules; the bench runs without them, so that the purge does not
    # race scenario 6 and scenario 9 measures the prompt send alone.
    Schedule.objects.all().delete()
    info = meta(quick, started)
    info["receipts_wanted"] = sizes.receipts
    reset_bench_rows()
    port = port or servers.free_port()
    b = Bench(sizes, f"http://127.0.0.1:{port}", out_dir)
    if only is not None and only <= UNSEEDED:
        print("scenarios 13 and 14 do not read the log: it is not seeded", flush=True)
    else:
        print("seeding the log (reused from earlier runs when present)", flush=True)
        seed_to_size(b, always=quick)
    connection.close()  # the servers and the load need no connection of ours meanwhile
    print(f"starting gunicorn ({servers.GUNICORN_WORKERS} sync workers) on {b.base_url}", flush=True)
    web = b.running["web"] = servers.start_gunicorn(port, out_dir)
    cluster = None
    figures: list[Figure] = []
    try:
        warm_up(b)
        for number, name, scenario in ((1, S1, claim_overhead), (2, S2, replay), (3, S3, claim_api), (8, S8, drf_view),
                                       (10, S10, inprocess_run_once), (12, S12, floor_and_ceiling),
                                       (13, S13, past_one_table), (14, S14, observer_cost),
                                       # With the worker; the search before the purge, which deletes
                                       # the seeded receipts that have expired.
                                       (4, S4, webhook_ingest), (5, S5, dashboard), (11, S11, search_at_scale),
                                       (6, S6, purge), (9, S9, outbox_latency)):
            if number == 4:
                cluster = b.running["qcluster"] = servers.start_qcluster(out_dir)
            if only is None or number in only:
                figures += timed(name, scenario, b)
        if any(f.id == "seed.receipts" for f in figures):
            figures.insert(next(i for i, f in enumerate(figures) if f.id == "seed.receipts") + 1, loader_figure(b))
        figures += memory_figures(b, web, cluster)
    finally:
        if cluster is not None:
            cluster.stop()
        web.stop()
    info["seconds"] = round((datetime.now(dt_timezone.utc) - started).total_seconds(), 1)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    if only is not None:
        info["only"] = sorted(only)
        written = out_dir / f"bench-{stamp}-only.json"
        write_json(written, info, figures, b.details)
        what = f"run of scenarios {sorted(only)}"
    else:
        for path in (out_dir / f"bench-{stamp}.json", out_dir / "latest.json"):
            write_json(path, info, figures, b.details)
        write_chart(out_dir / "latest.html", info, figures, b.details)
        (out_dir / "latest.md").write_text(markdown_table(figures) + "\n")
        written, what = f"{out_dir / 'latest.json'}, latest.html, latest.md", "run"
    print()
    print(table(figures))
    print(f"\n{info['mode']} {what}, {info['cores']} cores, {info['seconds']} s; wrote {written}")
    return 0


def polled(read: Callable[[], Any], done: Callable[[Any], bool], seconds: float) -> Any:
    """`read()` every half second until `done` with what it read or `seconds` are over: the last reading."""
    deadline = time.monotonic() + seconds
    while not done(reading := read()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return reading


def timed(name: str, scenario: Callable[[Bench], list[Figure]], b: Bench) -> list[Figure]:
    print(f"scenario {name} ...", flush=True)
    started = time.monotonic()
    figures = scenario(b)
    print(f"  done in {time.monotonic() - started:.1f} s", flush=True)
    return figures
