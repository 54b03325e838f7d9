"""A bounded closed-loop load generator: N client threads, each with its own keep-alive
httpx client, issue requests back to back until a request budget OR a time limit is spent.

Latency is measured around each whole request (connect, send, server time, read), with
`perf_counter`, so it is what a caller would see. Throughput is completed requests over
the wall time of the run.
"""

from __future__ import annotations

import itertools
import math
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

# (client, sequence number) -> response. Built by a scenario; must be thread-safe.
Request = Callable[[httpx.Client, int], httpx.Response]


@dataclass
class LoadResult:
    name: str
    latencies: list[float] = field(default_factory=list)  # seconds, successful requests only
    errors: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    elapsed: float = 0.0
    # CPU seconds each part of the system used during the run (see `cpu_probe`).
    cpu: dict[str, float] = field(default_factory=dict)
    first_error: str = ""

    @property
    def count(self) -> int:
        return len(self.latencies)

    @property
    def throughput(self) -> float:
        return self.count / self.elapsed if self.elapsed else 0.0

    def percentile(self, p: float) -> float:
        """Milliseconds; nearest-rank on the sorted latencies."""
        return percentile_ms(self.latencies, p)

    def cpu_ms_per_request(self) -> dict[str, float]:
        return {part: seconds * 1000 / self.count for part, seconds in self.cpu.items()} if self.count else {}

    def summary(self) -> dict:
        return {
            "cpu_ms_per_request": {part: round(ms, 3) for part, ms in self.cpu_ms_per_request().items()},
            "name": self.name,
            "requests": self.count,
            "errors": self.errors,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
            "elapsed_s": round(self.elapsed, 3),
            "throughput_rps": round(self.throughput, 1),
            "p50_ms": round(self.percentile(50), 2),
            "p95_ms": round(self.percentile(95), 2),
            "p99_ms": round(self.percentile(99), 2),
        }


def percentile_ms(latencies: list[float], p: float) -> float:
    if not latencies:
        return 0.0
    ordered = sorted(latencies)
    rank = max(0, min(len(ordered) - 1, math.ceil(p / 100 * len(ordered)) - 1))
    return ordered[rank] * 1000


def run_load(
    name: str,
    base_url: str,
    request: Request,
    *,
    clients: int = 8,
    max_requests: int = 1000,
    time_limit: float = 30.0,
    ok: Callable[[httpx.Response], bool] = lambda r: r.status_code < 400,
    cpu_probe: Callable[[], dict[str, dict[int, float]]] | None = None,
) -> LoadResult:
    """`cpu_probe` returns, for each server-side part, the CPU seconds each of its processes
    has used so far. Read before and after the run (processes present both times), with
    this process's own CPU as "client", it tells where the CPU of a request went, on a
    machine whose cores the load generator shares with the servers."""
    result = LoadResult(name)
    sequence = itertools.count()  # next() on it is atomic under the GIL
    lock = threading.Lock()
    deadline = time.monotonic() + time_limit

    def client_loop() -> None:
        latencies: list[float] = []
        statuses: Counter[int] = Counter()
        with httpx.Client(base_url=base_url, timeout=30.0) as client:
            while time.monotonic() < deadline:
                n = next(sequence)
                if n >= max_requests:
                    break
                started = time.perf_counter()
                try:
                    response = request(client, n)
                except httpx.HTTPError as exc:
                    error = repr(exc)
                else:
                    took = time.perf_counter() - started
                    statuses[response.status_code] += 1
                    if ok(response):
                        latencies.append(took)
                        continue
                    error = f"{response.status_code}: {response.text[:300]}"
                with lock:
                    result.errors += 1
                    result.first_error = result.first_error or error
        with lock:
            result.latencies.extend(latencies)
            result.statuses.update(statuses)

    threads = [threading.Thread(target=client_loop, name=f"{name}-{i}") for i in range(clients)]
    cpu_before = {"client": {0: time.process_time()}, **(cpu_probe() if cpu_probe else {})}
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.elapsed = time.perf_counter() - started
    cpu_after = {"client": {0: time.process_time()}, **(cpu_probe() if cpu_probe else {})}
    result.cpu = {
        part: sum(used - before.get(pid, used) for pid, used in cpu_after.get(part, {}).items())
        for part, before in cpu_before.items()
    }
    return result


@dataclass
class Comparison:
    """Variants run in alternating rounds (ABAB, then BABA...), so that a noisy neighbour
    on a shared machine hits every variant alike. Figures are medians over rounds; ratios
    are medians of the per-round ratios (each round's variants ran seconds apart)."""

    rounds: list[dict[str, LoadResult]] = field(default_factory=list)

    def median(self, variant: str, metric: str) -> float:
        values = [_metric(r[variant], metric) for r in self.rounds]
        return statistics.median(values) if values else 0.0

    def ratio(self, variant: str, baseline: str, metric: str = "throughput") -> float:
        values = [
            _metric(r[variant], metric) / _metric(r[baseline], metric)
            for r in self.rounds
            if _metric(r[baseline], metric)
        ]
        return statistics.median(values) if values else 0.0

    def cpu_ms(self, variant: str) -> dict[str, float]:
        """Median over rounds of each part's CPU milliseconds per request."""
        per_round = [r[variant].cpu_ms_per_request() for r in self.rounds]
        parts = per_round[0].keys() if per_round else ()
        return {part: statistics.median(p[part] for p in per_round if part in p) for part in parts}

    def summary(self) -> list[dict]:
        return [{name: res.summary() for name, res in r.items()} for r in self.rounds]


def _metric(result: LoadResult, metric: str) -> float:
    if metric == "throughput":
        return result.throughput
    return result.percentile(float(metric.lstrip("p")))


def compare(variants: dict[str, Callable[[int], LoadResult]], rounds: int) -> Comparison:
    """`variants[name](round)` runs one measured load; the order flips every round."""
    names = list(variants)
    comparison = Comparison()
    for r in range(rounds):
        results = {name: variants[name](r) for name in (names if r % 2 == 0 else names[::-1])}
        comparison.rounds.append({name: results[name] for name in names})
    return comparison
