"""The attempt log rolled up by hour: what the dashboard's windows count.

**Write side.** `roll_up()` (the `receipts.rollup` schedule, every minute) recomputes, from
the log, the absolute count of every (UTC hour, outcome) for the hours from a little before
the watermark up to the settled instant (SETTLE ago, to the minute), writes them with one
upsert, and moves the watermark (`Rollup.rolled_until`: every attempt before it is rolled
up) there. The hour the watermark falls in is rolled up as far as the watermark, and
counted again, further, by the next run, so the log is read for minutes, not for the hour
so far: at a few hundred attempts a second, the hour so far is a million rows. Absolute
counts, not increments: running it twice changes nothing, and a row that committed after
its hour was rolled up is counted by the next run.

- An attempt's `created_at` is taken before its transaction commits, so an attempt is
  rolled up only once it is SETTLE old; the hours just before the watermark are recomputed
  on every run (REPAIR) in case a transaction took even longer.
- The first run (empty roll-up) starts at the oldest attempt; each run covers at most
  MAX_HOURS_PER_RUN hours in one short transaction, so a full 35-day log is caught up in a
  few runs without ever holding a long transaction. `manage.py rollup` runs them all now.
- The watermark row is locked for the run (`select_for_update`; on SQLite the IMMEDIATE
  transaction does the same), so two runs take turns and the later one counts last.
- Nothing on the claim path writes here: request traffic pays nothing for the roll-up.

**Read side.** `attempt_counts(start, end)` counts attempts in (start, end]: the hours from
the first hour boundary after `start` up to the watermark come from the roll-up (the
watermark's own hour as far as the watermark), the partial first hour and everything from
the watermark on from the log. So a figure is exact whether the roll-up is empty, behind,
or caught up; a 24-hour window reads about 240 roll-up rows, the first partial hour and
the last few minutes of the log instead of every attempt of the day.

Attempts are written with `created_at` = now, so only `rewind()` (a bulk load of past rows,
`seed`) ever needs to send the roll-up back over old hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

from django.db import transaction
from django.db.models import Count, Min, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from receipts.models import Attempt, AttemptHourly, Rollup

NAME = "receipts.attempts"
HOUR = timedelta(hours=1)
SETTLE = timedelta(minutes=5)
REPAIR = timedelta(hours=3)
MAX_HOURS_PER_RUN = 48
# The scheduled task's runs per call: 24 x 45 new hours covers the 35-day log on a first
# run, each run its own short transaction, well within the task timeout.
MAX_RUNS_PER_TASK = 24


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(dt_timezone.utc).replace(minute=0, second=0, microsecond=0)


def floor_minute(moment: datetime) -> datetime:
    return moment.astimezone(dt_timezone.utc).replace(second=0, microsecond=0)


@dataclass
class RollupResult:
    start: datetime | None = None  # first hour recomputed
    end: datetime | None = None  # end of the last hour recomputed
    rolled_until: datetime | None = None  # the watermark after the run
    rows: int = 0  # (hour, outcome) counts written
    caught_up: bool = True


def _state() -> Rollup:
    # get_or_create settles the race of two first runs with the unique primary key.
    return Rollup.objects.get_or_create(name=NAME)[0]


def roll_up(now: datetime | None = None, *, max_hours: int = MAX_HOURS_PER_RUN) -> RollupResult:
    """One run: recompute a bounded span of hours and advance the watermark."""
    now = now or timezone.now()
    settled = floor_minute(now - SETTLE)
    _state()
    with transaction.atomic():
        state = Rollup.objects.select_for_update().get(name=NAME)
        if state.rolled_until is not None:
            start = floor_hour(state.rolled_until - REPAIR)
        else:
            oldest = Attempt.objects.aggregate(t=Min("created_at"))["t"]
            start = floor_hour(oldest) if oldest is not None else floor_hour(settled)
        end = min(settled, start + max_hours * HOUR)
        if state.rolled_until is not None:
            # On a slow clock, still count the watermark's hour as far as the watermark:
            # counting it to an earlier instant would lose what lies in between.
            end = max(end, state.rolled_until)
        result = RollupResult(rolled_until=state.rolled_until)
        if end > start:
            result.start, result.end, result.rows = start, end, _recompute(start, end)
        # Never backwards: a run with a slow clock must not hand settled hours back to the log.
        if state.rolled_until is None or end > state.rolled_until:
            state.rolled_until = max(end, start)
            state.save(update_fields=["rolled_until"])
        result.rolled_until = state.rolled_until
        result.caught_up = state.rolled_until >= settled
    return result


def _recompute(start: datetime, end: datetime) -> int:
    counted = (
        Attempt.objects.filter(created_at__gte=start, created_at__lt=end)
        .annotate(hour=TruncHour("created_at", tzinfo=dt_timezone.utc))
        .values_list("hour", "outcome")
        .annotate(n=Count("*"))
        .order_by()
    )
    # Every (hour, outcome) of the span is written, zeros included, and the zeros are then
    # deleted: a count that fell to nothing (its rows purged or deleted) does not linger.
    hours = [start + i * HOUR for i in range(-(-(end - start) // HOUR))]  # the last one may be partial
    counts = {(hour, o): 0 for hour in hours for o in Attempt.Outcome.values}
    counts.update({(floor_hour(hour), outcome): n for hour, outcome, n in counted})
    AttemptHourly.objects.bulk_create(
        [AttemptHourly(hour=h, outcome=o, count=n) for (h, o), n in counts.items()],
        update_conflicts=True,
        unique_fields=["hour", "outcome"],
        update_fields=["count"],
    )
    AttemptHourly.objects.filter(hour__gte=start, hour__lt=end, count=0).delete()
    return sum(1 for n in counts.values() if n)


def catch_up(
    now: datetime | None = None, *, max_hours: int = MAX_HOURS_PER_RUN, max_runs: int | None = None
) -> list[RollupResult]:
    """Run until the watermark reaches the last settled hour (or `max_runs` runs), one
    transaction per run."""
    results = [roll_up(now, max_hours=max_hours)]
    while not results[-1].caught_up and (max_runs is None or len(results) < max_runs):
        results.append(roll_up(now, max_hours=max_hours))
    return results


def rewind(to: datetime | None = None) -> None:
    """Hand hours back to the raw log: from `to`'s hour on, or, with None, every hour (the
    roll-up is emptied and rebuilt from the oldest attempt). For bulk loads of past rows;
    figures stay exact meanwhile, they just read more of the log until runs catch up."""
    _state()
    with transaction.atomic():
        state = Rollup.objects.select_for_update().get(name=NAME)
        if to is None:
            AttemptHourly.objects.all().delete()
            state.rolled_until = None
        elif state.rolled_until is not None and state.rolled_until > floor_hour(to):
            state.rolled_until = floor_hour(to)
        state.save(update_fields=["rolled_until"])


def rolled_until() -> datetime | None:
    return Rollup.objects.filter(name=NAME).values_list("rolled_until", flat=True).first()


def attempt_counts(
    start: datetime, end: datetime, *, outcomes: tuple[str, ...] | None = None, by_hour: bool = False
) -> list[tuple[datetime | None, str, int]]:
    """(hour, outcome, count) of the attempts logged in (start, end]; the hour is the UTC
    hour with `by_hour`, else None (one row per outcome, possibly several: add them up)."""
    log = Attempt.objects.all()
    if outcomes is not None:
        log = log.filter(outcome__in=outcomes)
    # The first whole hour is the one after start's: the hour start falls in is partial (a
    # window is open at its start), so it is read from the log.
    first_whole = floor_hour(start) + HOUR
    watermark = rolled_until()
    if watermark is None:
        return _grouped(log.filter(created_at__gt=start, created_at__lte=end), by_hour)
    if end >= watermark:
        # Every hour that starts before the watermark, its own (partial) hour included.
        tail = watermark
    else:
        # A span that ends before the watermark: whole hours only, the rest from the log.
        tail = floor_hour(end)
    if tail <= first_whole:
        return _grouped(log.filter(created_at__gt=start, created_at__lte=end), by_hour)
    rolled = AttemptHourly.objects.filter(hour__gte=first_whole, hour__lt=tail)
    if outcomes is not None:
        rolled = rolled.filter(outcome__in=outcomes)
    if by_hour:
        from_rollup = list(rolled.values_list("hour", "outcome", "count"))
    else:
        from_rollup = [(None, o, n) for o, n in rolled.values_list("outcome").annotate(n=Sum("count")).order_by()]
    # Two range queries rather than one with OR: each is an index-only scan of
    # (created_at, outcome) on PostgreSQL, where an OR would visit the heap.
    return (
        _grouped(log.filter(created_at__gt=start, created_at__lt=first_whole), by_hour)
        + from_rollup
        + _grouped(log.filter(created_at__gte=tail, created_at__lte=end), by_hour)
    )


def _grouped(qs, by_hour: bool) -> list[tuple[datetime | None, str, int]]:
    if by_hour:
        rows = qs.annotate(t=TruncHour("created_at", tzinfo=dt_timezone.utc)).values_list("t", "outcome")
        return list(rows.annotate(n=Count("*")).order_by())
    return [(None, o, n) for o, n in qs.values_list("outcome").annotate(n=Count("*")).order_by()]
