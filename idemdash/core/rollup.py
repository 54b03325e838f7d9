"""Logs rolled up by hour: what the dashboard's windows count (docs/dashboard.md, "How the
receipt, delivery and outbox figures are computed: hourly roll-ups").

A `HourlyRollup` counts a log's rows by UTC hour and a few group fields into a
`HourlyCount` table, with its watermark in `Rollup`. Each app lists its roll-ups in
`<app>/rollup.py` as `ROLLUPS` (`installed_rollups()`), so the core imports no app it rolls
up for. The write side (`HourlyRollup.roll_up`) writes absolute counts, so a run repeated
changes nothing; the read side (`HourlyRollup.counts`) adds the log past the watermark, so
a figure is exact however far behind the roll-up is. Nothing on the request path writes here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.db import connections, models, transaction
from django.db.models import Count, Min, QuerySet, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from idemdash.core.discovery import declared_by_apps

HOUR = timedelta(hours=1)
# A row's time is taken before its transaction commits, so a row is rolled up only once it
# is SETTLE old, and the REPAIR hours before the watermark are recomputed on every run in
# case a transaction took even longer.
SETTLE = timedelta(minutes=5)
REPAIR = timedelta(hours=3)
# One run's span, in one short transaction: a first run (empty roll-up) starts at the
# oldest row and catches a 35-day log up in a few runs, never holding a long transaction.
MAX_HOURS_PER_RUN = 48
# The scheduled task's runs per call: 24 x 45 new hours covers the 35-day log on a first
# run, each run its own short transaction, well within the task timeout.
MAX_RUNS_PER_TASK = 24
# Roll-up rows outlive their logs (35 days), so the 30-day charts keep their counts.
RETENTION_DAYS = 90


def floor_hour(moment: datetime) -> datetime:
    return moment.astimezone(dt_timezone.utc).replace(minute=0, second=0, microsecond=0)


def floor_minute(moment: datetime) -> datetime:
    return moment.astimezone(dt_timezone.utc).replace(second=0, microsecond=0)


class HourlyCount(models.Model):
    """A row of a roll-up table (`HourlyRollup`): how many rows of a log fell in one UTC
    hour, per value of the table's group fields (declared by each table, with its unique
    constraint on hour and groups)."""

    hour = models.DateTimeField(help_text="Start of the hour (UTC).")
    count = models.PositiveIntegerField()

    class Meta:
        # No app_label: an abstract model has no table, and a subclass without a Meta of its
        # own would inherit the label and land in another app.
        abstract = True

    def __str__(self) -> str:
        groups = [str(getattr(self, f.name)) for f in self._meta.concrete_fields if f.name not in ("id", "hour", "count")]
        return f"{self.hour:%Y-%m-%d %H:00} {' '.join(groups)}".rstrip() + f": {self.count}"


def per_hour(verbose_name: str, *groups: str) -> type:
    """The Meta of a roll-up table: `verbose_name` (its own plural) and the unique constraint
    on the hour and the table's group fields that the roll-up's upsert targets."""
    return type("Meta", (), {
        "verbose_name": verbose_name,
        "verbose_name_plural": verbose_name,
        "constraints": [models.UniqueConstraint(fields=["hour", *groups], name="%(app_label)s_%(class)s_uniq")],
    })


class Rollup(models.Model):
    """The watermark of one roll-up: `rolled_until` is the start of the first hour that is
    NOT rolled up yet (null: none is). Readers take hours before it from the roll-up table
    and everything after it from the raw log. The row is also the lock that makes two runs
    of a roll-up take turns."""

    name = models.CharField(max_length=64, primary_key=True)
    rolled_until = models.DateTimeField(null=True, blank=True)
    # What retention deleted of the roll-up's rows, per group ("|"-joined group values ->
    # count): added by `HourlyRollup.carry` in the purge's own transaction, so that `totals`
    # never goes down when an old hour is purged (a Prometheus counter must not).
    carried = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"{self.name} until {self.rolled_until}"


@dataclass
class RollupResult:
    name: str  # the roll-up's
    start: datetime | None = None  # first hour recomputed
    end: datetime | None = None  # end of the last hour recomputed
    rolled_until: datetime | None = None  # the watermark after the run
    rows: int = 0  # (hour, group) counts written
    caught_up: bool = True


@dataclass(frozen=True)
class HourlyRollup:
    """`log` rows counted by (UTC hour of `time_field`, *`groups`) into `table`, a model with
    `hour`, the same group fields and `count`, unique on (hour, *groups). `groups` may be
    empty: rows counted by hour alone."""

    name: str  # the watermark row's key in Rollup
    log: type[models.Model]
    time_field: str
    groups: tuple[str, ...]
    table: type[models.Model]
    retention_setting: str  # days to keep the roll-up's rows (default RETENTION_DAYS)
    # Group fields the log computes rather than stores, (name, expression) pairs: a
    # duration's histogram bucket (`idemdash.core.attempts.rollup_by_duration`). An
    # expression may be a function returning one, built when read (from today's settings).
    computed: tuple[tuple[str, Any], ...] = ()
    # Fields of the log summed per (hour, groups) beside the count, (table column, log field)
    # pairs: a duration histogram's total time (`sum_ms`), which Prometheus' `_sum` reports.
    summed: tuple[tuple[str, str], ...] = ()

    def _logged(self, where: dict[str, Any], **span: datetime) -> QuerySet:
        """The log filtered by `where` and by the time field: gt=, gte=, lt=, lte=."""
        bounds = {f"{self.time_field}__{op}": moment for op, moment in span.items()}
        logged = self.log._default_manager.all()
        if self.computed:
            logged = logged.annotate(**{name: made() if callable(made) else made for name, made in self.computed})
        return logged.filter(**where, **bounds)

    def _state(self) -> Rollup:
        # get_or_create settles the race of two first runs with the unique primary key.
        return Rollup.objects.get_or_create(name=self.name)[0]

    def roll_up(self, now: datetime | None = None, *, max_hours: int = MAX_HOURS_PER_RUN) -> RollupResult:
        """One run: recompute a bounded span of hours and advance the watermark.

        The absolute count of every (UTC hour, group) from a little before the watermark up
        to the settled instant (SETTLE ago, to the minute), written with one upsert; then the
        watermark moves there. The watermark's own hour is counted as far as the watermark,
        and further by the next run, so the log is read for minutes, not for the hour so far
        (at a few hundred rows a second, that is a million rows). Absolute counts, not
        increments: running it twice changes nothing, and a row that committed after its
        hour was rolled up is counted by the next run. Only the REPAIR span is recomputed,
        so rows that the log's own retention deletes later stay counted in their hours.
        The watermark row is locked for the run (`select_for_update`; on SQLite the
        IMMEDIATE transaction does the same), so two runs take turns and the later counts last."""
        now = now or timezone.now()
        settled = floor_minute(now - SETTLE)
        self._state()
        with transaction.atomic():
            state = Rollup.objects.select_for_update().get(name=self.name)
            if state.rolled_until is not None:
                start = floor_hour(state.rolled_until - REPAIR)
            else:
                oldest = self.log._default_manager.aggregate(t=Min(self.time_field))["t"]
                start = floor_hour(oldest) if oldest is not None else floor_hour(settled)
            end = min(settled, start + max_hours * HOUR)
            if state.rolled_until is not None:
                # On a slow clock, still count the watermark's hour as far as the watermark:
                # counting it to an earlier instant would lose what lies in between.
                end = max(end, state.rolled_until)
            result = RollupResult(self.name, rolled_until=state.rolled_until)
            if end > start:
                result.start, result.end, result.rows = start, end, self._recompute(start, end)
            # Never backwards: a run with a slow clock must not hand settled hours back to the log.
            if state.rolled_until is None or end > state.rolled_until:
                state.rolled_until = max(end, start)
                state.save(update_fields=["rolled_until"])
            result.rolled_until = state.rolled_until
            result.caught_up = state.rolled_until >= settled
        return result

    def _recompute(self, start: datetime, end: datetime) -> int:
        counted = (
            self._logged({}, gte=start, lt=end)
            .annotate(hour=TruncHour(self.time_field, tzinfo=dt_timezone.utc))
            .values_list("hour", *self.groups)
            .annotate(n=Count("*"), **{column: Sum(field) for column, field in self.summed})
            .order_by()
        )
        sums = [column for column, _ in self.summed]
        width = len(self.groups)
        rows = [
            self.table(hour=floor_hour(hour), **dict(zip(self.groups, rest[:width])), count=rest[width],
                       **{column: value or 0 for column, value in zip(sums, rest[width + 1:])})
            for hour, *rest in counted
        ]
        span = self.table._default_manager.filter(hour__gte=start, hour__lt=end)
        # Every count of the span is set to zero, the log's counts are written over them, and
        # what is still zero is deleted: a count that fell to nothing (its rows deleted) does
        # not linger. An update, not a delete and insert: on PostgreSQL it changes no indexed
        # column, so it leaves no dead index entries behind for every run.
        span.update(count=0, **dict.fromkeys(sums, 0))
        manager = self.table._default_manager
        # MySQL/MariaDB's upsert (ON DUPLICATE KEY) names no target: any unique key decides,
        # and (hour, groups) is the only one an inserted row (no pk) can collide on.
        target = ["hour", *self.groups] if connections[manager.db].features.supports_update_conflicts_with_target else None
        manager.bulk_create(rows, update_conflicts=True, unique_fields=target, update_fields=["count", *sums])
        span.filter(count=0).delete()
        return len(rows)

    def catch_up(
        self, now: datetime | None = None, *, max_hours: int = MAX_HOURS_PER_RUN, max_runs: int | None = None
    ) -> list[RollupResult]:
        """Run until the watermark reaches the settled instant (or `max_runs` runs), one
        transaction per run."""
        results = [self.roll_up(now, max_hours=max_hours)]
        while not results[-1].caught_up and (max_runs is None or len(results) < max_runs):
            results.append(self.roll_up(now, max_hours=max_hours))
        return results

    def rewind(self, to: datetime | None = None) -> None:
        """Hand hours back to the log: from `to`'s hour on, or, with None, every hour (the
        roll-up is emptied and rebuilt from the oldest row, so hours whose rows the log no
        longer has lose them). Logs are written with their time = now, so only a bulk load
        of past rows (`seed`) needs this; figures stay exact meanwhile, they just read more
        of the log until runs catch up."""
        self._state()
        with transaction.atomic():
            state = Rollup.objects.select_for_update().get(name=self.name)
            if to is None:
                self.table._default_manager.all().delete()
                state.rolled_until = None
            elif state.rolled_until is not None and state.rolled_until > floor_hour(to):
                state.rolled_until = floor_hour(to)
            state.save(update_fields=["rolled_until"])

    def rolled_until(self) -> datetime | None:
        return Rollup.objects.filter(name=self.name).values_list("rolled_until", flat=True).first()

    def expired(self, now: datetime) -> QuerySet:
        """Roll-up rows past their retention, for a Purger."""
        days = getattr(settings, self.retention_setting, RETENTION_DAYS)
        return self.table._default_manager.filter(hour__lt=now - timedelta(days=days))

    def carry(self, batch: QuerySet, now: datetime) -> int:
        """A Purger's `archive` for this roll-up's expired rows: their counts (and sums), per
        group, added to the watermark row's `carried` before the rows are deleted, in the same
        transaction. Returns 0 (nothing archived: the rows are still deleted)."""
        per_group = self._per_group(batch, Sum("count"), *(Sum(column) for column, _ in self.summed))
        if not per_group:
            return 0
        state, _ = Rollup.objects.select_for_update().get_or_create(name=self.name)
        carried = dict(state.carried or {})
        width = len(self.groups)
        for _, *row in per_group:
            group = _group_key(row[:width])
            carried[group] = _added(carried.get(group), row[width:]) if self.summed else (
                carried.get(group, 0) + int(row[width])
            )
        state.carried = carried
        state.save(update_fields=["carried"])
        return 0

    def totals(self, now: datetime) -> dict[tuple[str, ...], int]:
        """Every row ever logged up to `now`, per group (values as text): the roll-up, the log
        after its watermark, and what retention carried away. Monotonic, for counters."""
        return {group: values[0] for group, values in self.sums(now).items()}

    def sums(self, now: datetime) -> dict[tuple[str, ...], list]:
        """`totals` with the `summed` fields: [count, *sums] per group. The roll-up's hours
        before the watermark (its own hour as far as the watermark), the log from the
        watermark to `now`, and `carried`."""
        summed_log = [Sum(field) for _, field in self.summed]
        watermark = self.rolled_until()
        if watermark is None:
            rows = self._per_group(self._logged({}, lte=now), Count("*"), *summed_log)
        else:
            rolled = self.table._default_manager.filter(hour__lt=watermark)
            rows = self._per_group(rolled, Sum("count"), *(Sum(column) for column, _ in self.summed))
            rows += self._per_group(self._logged({}, gte=watermark, lte=now), Count("*"), *summed_log)
        totals: dict[tuple[str, ...], list] = {}
        width = len(self.groups)
        for _, *row in rows:
            group = tuple(str(g) for g in row[:width])
            totals[group] = _added(totals.get(group), row[width:])
        carried = Rollup.objects.filter(name=self.name).values_list("carried", flat=True).first() or {}
        for group, values in carried.items():
            key = tuple(group.split("|")) if self.groups else ()
            totals[key] = _added(totals.get(key), values if isinstance(values, list) else [values])
        return totals

    def counts(self, start: datetime, end: datetime, *, by_hour: bool = False, **where: Any) -> list[tuple]:
        """(hour, *groups, count) of the rows logged in (start, end], filtered by `where`
        (lookups on the group fields only: they apply to the log and the roll-up alike);
        the hour is the UTC hour with `by_hour`, else None (rows per group, possibly
        several for one group: add them up).

        The hours from the first hour boundary after `start` up to the watermark come from the
        roll-up (the watermark's own hour as far as the watermark); the partial first hour and
        everything from the watermark on come from the log. So a figure is exact whether the
        roll-up is empty, behind or caught up, and a 24-hour window reads about 24 roll-up
        rows per group and a few minutes of the log instead of every row of the day."""
        trunc = TruncHour if by_hour else None
        # The first whole hour is the one after start's: the hour start falls in is partial
        # (a window is open at its start), so it is read from the log.
        first_whole = floor_hour(start) + HOUR
        watermark = self.rolled_until()
        if watermark is None:
            return self._grouped(self._logged(where, gt=start, lte=end), trunc)
        if end >= watermark:
            # Every hour that starts before the watermark, its own (partial) hour included.
            tail = watermark
        else:
            # A span that ends before the watermark: whole hours only, the rest from the log.
            tail = floor_hour(end)
        if tail <= first_whole:
            return self._grouped(self._logged(where, gt=start, lte=end), trunc)
        rolled = self.table._default_manager.filter(hour__gte=first_whole, hour__lt=tail, **where)
        if by_hour:
            from_rollup = list(rolled.values_list("hour", *self.groups, "count"))
        else:
            from_rollup = self._per_group(rolled, Sum("count"))
        # Two range queries rather than one with OR: each is an index-only scan of the log's
        # (time, groups...) index on PostgreSQL, where an OR would visit the heap.
        return (
            self._grouped(self._logged(where, gt=start, lt=first_whole), trunc)
            + from_rollup
            + self._grouped(self._logged(where, gte=tail, lte=end), trunc)
        )

    def log_counts(self, start: datetime, end: datetime, *, trunc: type, **where: Any) -> list[tuple]:
        """(t, *groups, count) straight from the log for (start, end], `t` truncated by
        `trunc` (TruncMinute...): for chart buckets finer than the roll-up's hours."""
        return self._grouped(self._logged(where, gt=start, lte=end), trunc)

    def _per_group(self, qs: QuerySet, total: Any, *more: Any) -> list[tuple]:
        """(None, *groups, total, *more) of `qs` per group; with no groups, one row (none if
        empty)."""
        named = {"n": total, **{f"more{i}": aggregate for i, aggregate in enumerate(more)}}
        if not self.groups:
            # values_list() without fields would mean every field: one aggregate instead.
            values = qs.aggregate(**named)
            return [(None, *values.values())] if values["n"] else []
        return [(None, *row) for row in qs.values_list(*self.groups).annotate(**named).order_by()]

    def _grouped(self, qs: QuerySet, trunc: type | None) -> list[tuple]:
        # COUNT(*), never COUNT(id): the logs' time indexes hold the groups but not the id.
        if trunc is None:
            return self._per_group(qs, Count("*"))
        rows = qs.annotate(t=trunc(self.time_field, tzinfo=dt_timezone.utc)).values_list("t", *self.groups)
        return list(rows.annotate(n=Count("*")).order_by())


# Before any row: the start of `totals`.
EPOCH = datetime(2000, 1, 1, tzinfo=dt_timezone.utc)


def _group_key(groups: list[Any]) -> str:
    return "|".join(str(g) for g in groups)


def _added(values: list | None, more: Any) -> list:
    """[count, *sums] plus `more` (the same shape; a None sum is an empty one's, 0)."""
    values = list(values or [0])
    more = [m or 0 for m in more]
    width = max(len(values), len(more))
    values += [0] * (width - len(values))
    more += [0] * (width - len(more))
    return [int(values[0]) + int(more[0]), *(v + m for v, m in zip(values[1:], more[1:]))]


def installed_rollups() -> list[HourlyRollup]:
    """The ROLLUPS of every installed app's `rollup` module, in INSTALLED_APPS order."""
    return declared_by_apps("rollup", "ROLLUPS")


def catch_up(
    now: datetime | None = None, *, max_hours: int = MAX_HOURS_PER_RUN, max_runs: int | None = None
) -> list[RollupResult]:
    """Catch every installed roll-up up, one after the other (`max_runs` runs each), then
    take every app's gauge samples (`rollup.SAMPLERS`: functions of now, such as the outbox
    backlog's age, which no log can tell afterwards)."""
    results = [
        result
        for rollup in installed_rollups()
        for result in rollup.catch_up(now, max_hours=max_hours, max_runs=max_runs)
    ]
    for sample in declared_by_apps("rollup", "SAMPLERS"):
        sample(now or timezone.now())
    return results


def rewind(to: datetime | None = None) -> None:
    """Rewind every installed roll-up (see `HourlyRollup.rewind`): after a bulk load or a
    bulk delete of past rows, whichever logs it touched."""
    for rollup in installed_rollups():
        rollup.rewind(to)
