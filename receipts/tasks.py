"""django-q2 entry points, referred to by dotted path from schedules.py."""

from dataclasses import asdict

from idemdash.core import bulk_runs, rollup
from receipts import compaction, retention


def purge() -> list[dict]:
    return [asdict(result) for result in retention.purge()]


def compact() -> list[dict]:
    return [asdict(result) for result in compaction.compact()]


def roll_up() -> list[dict]:
    return [asdict(result) for result in rollup.catch_up(max_runs=rollup.MAX_RUNS_PER_TASK)]


def advance_bulk_run(run_id: int) -> int:
    return bulk_runs.advance(run_id)


def resume_bulk_runs() -> list[int]:
    return bulk_runs.resume_stalled()
