"""CPU per call of a path run in this process, and the in-process API's paths (`make bench`
scenario 10, and `python -m idemdash.devtools.bench.inprocess`):

- `insert`: the bench row's ORM insert alone, the yardstick;
- `run_once`: the same insert under `receipts.run_once` with a fresh key (the claim, the
  lease's heartbeat, the insert, the stored result);
- `run_once_replay`: the same keys again, answered from their receipts.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

RUN_ONCE_PATHS = ("insert", "run_once", "run_once_replay")


def cpu_per_call(calls: list[Callable[[], None]]) -> float:
    """CPU µs per call (this process's, so the database server's own time is not in it)."""
    started = time.process_time()
    for call in calls:
        call()
    return (time.process_time() - started) / len(calls) * 1e6


def median_of_rounds(one_round: Callable[[str], dict[str, Any]], rounds: int) -> dict[str, Any]:
    """The median of each figure (path: µs, or path: part: µs) over `rounds` calls of `one_round`."""
    one_round("warm")  # connections, caches, prepared statements
    measured = [one_round(str(r)) for r in range(rounds)]

    def median(values: list[Any]) -> Any:
        if isinstance(values[0], dict):
            return {name: median([v.get(name, 0.0) for v in values]) for name in values[0]}  # absent: 0
        return statistics.median(values)

    return median(measured)


def measure_run_once(*, calls: int, rounds: int) -> dict[str, float]:
    """Median CPU µs per call of each path in RUN_ONCE_PATHS."""
    import receipts
    from idemdash.devtools.bench.models import BenchRow

    run = uuid.uuid4().hex[:8]

    def insert(n: int) -> dict[str, int]:
        return {"row": BenchRow.objects.create(label=f"run_once {n}").pk}

    ran: list[int] = []  # the inserts run_once let run

    def effect(n: int) -> dict[str, int]:
        ran.append(n)
        return insert(n)

    def once(key: str, n: int, replayed: bool) -> None:
        before = len(ran)
        stored = receipts.run_once(key, "bench.run_once", effect, n)
        # A fresh key runs the insert once; a replay runs nothing and returns the stored row.
        if len(ran) - before != (0 if replayed else 1) or not isinstance(stored, dict) or "row" not in stored:
            raise RuntimeError(f"run_once of {key} (replayed: {replayed}) answered {stored!r}")

    def one_round(tag: str) -> dict[str, float]:
        keys = [f"run-once-{run}-{tag}-{n}" for n in range(calls)]
        return {
            "insert": cpu_per_call([lambda n=n: insert(n) for n in range(calls)]),
            "run_once": cpu_per_call([lambda n=n: once(keys[n], n, False) for n in range(calls)]),
            "run_once_replay": cpu_per_call([lambda n=n: once(keys[n], n, True) for n in range(calls)]),
        }

    return median_of_rounds(one_round, rounds)
