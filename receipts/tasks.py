"""django-q2 entry points, referred to by dotted path from schedules.py."""

from dataclasses import asdict

from idemdash.core import rollup
from receipts import retention


def purge() -> list[dict]:
    return [asdict(result) for result in retention.purge()]


def roll_up() -> list[dict]:
    return [asdict(result) for result in rollup.catch_up(max_runs=rollup.MAX_RUNS_PER_TASK)]
