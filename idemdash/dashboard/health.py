"""Health at a glance: the overview's problem tiles coloured by a threshold on a rate or an
age, each saying since when it has been in its state, and the first line that sums them up
(docs/dashboard.md, "Health at a glance").

A count says little on its own: 12 conflicts are nothing in 10,000 requests and a lot in 20.
So each check measures a **rate** (a share of the traffic in the last
`IDEMDASH_HEALTH_WINDOW_MINUTES`) or an **age** (how long the oldest row has waited) and
compares it with two thresholds, warn and bad (`DEFAULT_THRESHOLDS`). The figures come from
the same blocks as the tiles and the alert rules (`alerts.Measurements`), so a check means
what the tile shows."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from idemdash.dashboard import alerts, queries
from idemdash.dashboard.conf import setting
from idemdash.dashboard.models import HealthState
from idemdash.dashboard.templatetags.idemdash_tags import duration, percent

OK, WARN, BAD = "ok", "warn", "bad"
SEVERITY = {OK: 0, WARN: 1, BAD: 2}

RATE, AGE = "rate", "age"

# check -> (warn, bad): percent for rates, seconds for ages; a value at or above a
# threshold is in that state. IDEMDASH_HEALTH_THRESHOLDS overrides them (validated by
# `manage.py check`). docs/dashboard.md ("Health at a glance") explains each choice.
DEFAULT_THRESHOLDS: dict[str, tuple[float, float]] = {
    "receipts.concurrent_duplicates": (25, 50),
    "receipts.mismatch_conflicts": (10, 25),
    "receipts.failed": (5, 20),
    "receipts.stuck": (60, 180),
    "unprotected.duplicates": (1, 5),
    "fresh_keys.ran_again": (1, 5),
    "webhooks.rejected": (1, 10),
    "webhooks.dead": (1, 5),
    "webhooks.stuck": (120, 300),
    "outbox.backlog_age": (180, 600),
    "outbox.dead": (1, 5),
    "outbox.stuck": (120, 300),
}


@dataclass(frozen=True)
class Check:
    """A rate check's name is the figure it counts ("block.figure"), a share of the sum of
    the figures `of`; an age check's `age` measures seconds."""

    name: str
    label: str  # as the first line names a problem
    what: str  # what the value is, for the tile's note and the docs
    url: str  # the filtered list, as `alerts.page_path` reads it
    of: tuple[str, ...] = ()
    age: Callable[[alerts.Measurements, timedelta], float] | None = None

    @property
    def kind(self) -> str:
        return AGE if self.age else RATE

    @property
    def unit(self) -> str:
        return "%" if self.kind == RATE else " s"


def _stuck_age(stuck: Callable[[datetime], Any]) -> Callable[[alerts.Measurements, timedelta], float]:
    """Seconds the oldest stuck row has been past its lease (its partial index's first row)."""
    return lambda m, span: queries.oldest_age(stuck(m.now), "lease_expires_at", m.now)


CHECKS: list[Check] = [
    Check("receipts.concurrent_duplicates", "Concurrent duplicates",
          "of claim requests arrived while the key's first attempt ran, 409 or waited",
          "dashboard:receipts?conflict=concurrent", of=("receipts.requests",)),
    Check("receipts.mismatch_conflicts", "422 mismatches", "of claim requests reused a key with another request",
          "dashboard:receipts?conflict=422", of=("receipts.requests",)),
    Check("receipts.failed", "Failed keys", "failed keys per claim that ran",
          "dashboard:receipts?status=failed&sort=-updated", of=("receipts.claimed",)),
    Check("receipts.stuck", "Stuck receipts", "the oldest receipt past its lease",
          "dashboard:stuck", age=_stuck_age(queries.stuck_receipts)),
    Check("unprotected.duplicates", "Duplicates on unprotected routes",
          "of write requests to routes nothing protects repeated one within the observer's window",
          "dashboard:coverage", of=("unprotected.requests",)),
    Check("fresh_keys.ran_again", "Retries under a fresh key",
          "of claims that ran were a request another key had made within the window",
          "dashboard:coverage", of=("receipts.claimed",)),
    Check("webhooks.rejected", "Rejected deliveries", "of deliveries failed verification",
          "dashboard:rejected", of=("webhooks.deliveries", "webhooks.rejected")),
    Check("webhooks.dead", "Dead webhook events", "dead events per unique event received",
          "dashboard:events?status=dead", of=("webhooks.events",)),
    Check("webhooks.stuck", "Stuck webhook events", "the oldest event past its lease",
          "dashboard:stuck#stuck-events", age=_stuck_age(queries.stuck_events)),
    Check("outbox.backlog_age", "Outbox backlog", "the oldest waiting message since it was enqueued",
          "dashboard:outbox?status=waiting", age=lambda m, span: m.figure("outbox.oldest_pending_age_seconds", span)),
    Check("outbox.dead", "Dead outbox messages", "of messages that finished went dead",
          "dashboard:outbox?status=dead", of=("outbox.sent", "outbox.dead")),
    Check("outbox.stuck", "Stuck outbox messages", "the oldest message in flight past its lease",
          "dashboard:stuck#stuck-messages", age=_stuck_age(queries.stuck_messages)),
]
CHECKS_BY_NAME = {c.name: c for c in CHECKS}
assert set(CHECKS_BY_NAME) == set(DEFAULT_THRESHOLDS), "every check needs its thresholds"

# The overview's tiles (their data-figure) and the check that colours each: a check's own
# tile, and the backlog's two for its age. A tile not here shows traffic, not health, and
# stays uncoloured.
TILE_CHECKS: dict[str, str] = {
    **{c.name: c.name for c in CHECKS if c.name != "outbox.backlog_age"},
    "outbox.pending": "outbox.backlog_age",
    "outbox.oldest_pending_age_seconds": "outbox.backlog_age",
}


# --- settings ----------------------------------------------------------------------------------


def window_minutes() -> int:
    return setting("IDEMDASH_HEALTH_WINDOW_MINUTES")


def min_sample() -> int:
    return setting("IDEMDASH_HEALTH_MIN_SAMPLE")


def thresholds() -> dict[str, tuple[float, float]]:
    return {**DEFAULT_THRESHOLDS, **setting("IDEMDASH_HEALTH_THRESHOLDS")}


def setting_problems() -> list[str]:
    """What is wrong with the health settings, for `manage.py check` (idemdash/dashboard/checks.py)."""
    problems = []
    minutes = window_minutes()
    if type(minutes) is not int or not 1 <= minutes <= 24 * 60:
        problems.append(f"IDEMDASH_HEALTH_WINDOW_MINUTES must be a whole number of minutes from 1 to 1440; got {minutes!r}.")
    sample = min_sample()
    if type(sample) is not int or sample < 1:
        problems.append(f"IDEMDASH_HEALTH_MIN_SAMPLE must be a whole number of at least 1; got {sample!r}.")
    given = setting("IDEMDASH_HEALTH_THRESHOLDS")
    if not isinstance(given, dict):
        return [*problems, f"IDEMDASH_HEALTH_THRESHOLDS must be a dict of check name -> (warn, bad); got {given!r}."]
    for name, pair in given.items():
        if name not in CHECKS_BY_NAME:
            problems.append(f"IDEMDASH_HEALTH_THRESHOLDS: unknown check {name!r}; the checks are {', '.join(CHECKS_BY_NAME)}.")
            continue
        numbers = isinstance(pair, (tuple, list)) and len(pair) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v == v for v in pair
        )
        unit = "percent" if CHECKS_BY_NAME[name].kind == RATE else "seconds"
        if not numbers or not 0 < pair[0] <= pair[1] or (unit == "percent" and pair[1] > 100):
            problems.append(
                f"IDEMDASH_HEALTH_THRESHOLDS[{name!r}] must be (warn, bad) in {unit}, 0 < warn <= bad"
                + (" <= 100" if unit == "percent" else "") + f"; got {pair!r}."
            )
    return problems


# --- measuring -------------------------------------------------------------------------------


@dataclass
class Reading:
    check: Check
    state: str
    value: float  # a fraction for a rate (see `rate`), seconds for an age
    part: int  # for a rate: the rows counted...
    sample: int  # ... of these
    warn: float
    bad: float
    since: datetime | None = None

    @property
    def name(self) -> str:
        return self.check.name

    @property
    def url(self) -> str:
        return alerts.page_path(self.check.url)

    @property
    def value_display(self) -> str:
        if self.check.kind == RATE:
            if self.sample < min_sample():
                return f"{self.part} of {self.sample}"
            return percent(self.value)
        return duration(self.value) if self.value >= 1 else "0 s"

    @property
    def threshold_display(self) -> str:
        return f"warn ≥ {self.warn:g}{self.check.unit}, bad ≥ {self.bad:g}{self.check.unit}"

    @property
    def summary(self) -> str:
        """How the first line names a problem: "Dead outbox messages: 20% of messages that
        finished went dead (bad ≥ 5%)"."""
        limit = self.bad if self.state == BAD else self.warn
        return f"{self.check.label}: {self.value_display} ({self.check.what}; {self.state} ≥ {limit:g}{self.check.unit})"


def rate(part: int, sample: int) -> float:
    """The share judged: over at least IDEMDASH_HEALTH_MIN_SAMPLE rows, so 1 failure in 2
    requests does not read as 50%, while 5 dead messages of 5 still read as 25% (bad)."""
    return part / max(sample, min_sample()) if part else 0.0


def _state(value: float, kind: str, warn: float, bad: float) -> str:
    value = value * 100 if kind == RATE else value
    if value >= bad:
        return BAD
    return WARN if value >= warn else OK


def measure(now: datetime | None = None) -> list[Reading]:
    """Every check's reading, now, over the health window (no "since": see `observe`)."""
    now = now or timezone.now()
    m, span = alerts.Measurements(now), timedelta(minutes=window_minutes())
    limits = thresholds()
    readings = []
    for check in CHECKS:
        if check.age:
            value, part, sample = check.age(m, span), 0, 0
        else:
            sample = int(sum(m.figure(name, span) for name in check.of))
            # A count can exceed its base (events that died now were received before the window).
            part = min(int(m.figure(check.name, span)), sample)
            value = rate(part, sample)
        warn, bad = limits[check.name]
        readings.append(Reading(check, _state(value, check.kind, warn, bad), value, part, sample, warn, bad))
    return readings


def record(readings: list[Reading], now: datetime) -> None:
    """Write the transitions among `readings` and give each its `since`. One read of the
    small table; a write only for a check whose state changed, made conditional on the row
    still holding an older, different state, so that two observers record one transition
    (and an observer with an older `now` never overwrites a newer one)."""
    stored = {s.name: s for s in HealthState.objects.filter(name__in=[r.name for r in readings])}
    for r in readings:
        known = stored.get(r.name)
        if known is not None and known.state == r.state:
            r.since = known.since
            continue
        if known is None:
            try:
                with transaction.atomic():
                    HealthState.objects.create(name=r.name, state=r.state, since=now, value=r.value)
            except IntegrityError:  # another observer inserted it first
                pass
        else:
            HealthState.objects.filter(name=r.name, since__lt=now).exclude(state=r.state).update(
                state=r.state, since=now, value=r.value
            )
        # Whoever won, the row now says since when this state holds.
        winner = HealthState.objects.filter(name=r.name, state=r.state).values_list("since", flat=True).first()
        r.since = winner or now


def observe(now: datetime | None = None) -> list[Reading]:
    """Measure every check and record its transitions (`record`). The minute's alert schedule
    observes (`tasks.evaluate_alerts`), and so does every overview load, which measures the
    checks anyway; a page therefore reads "since" from one small table instead of scanning
    history. "Since" is when the dashboard first saw the state, at most a minute after it
    began while the schedule runs."""
    now = now or timezone.now()
    readings = measure(now)
    record(readings, now)
    return readings


@dataclass
class Summary:
    """The overview's first line: the worst state among the checks and the firing alerts,
    and each problem with its link."""

    state: str
    problems: list[dict[str, str]]  # {"text", "url", "state"}
    tiles: dict[str, dict[str, Reading]]  # block -> figure -> reading, as the template reads a tile's
    window_minutes: int


def summary(readings: list[Reading], firing: list[Any], culprits: Sequence[Any] = ()) -> Summary:
    """`firing`: the firing alerts of `alerts.overview_alerts` (with their `cause` path);
    `culprits`: the failure groups failing now (queries.failure_culprits). Each is
    a problem, linked to the page that shows its cause."""
    problems = [
        {"text": r.summary, "url": r.url, "state": r.state}
        for r in sorted(readings, key=lambda r: -SEVERITY[r.state])
        if r.state != OK
    ]
    problems += [
        {"text": f"Alert “{a.rule_name}” firing: {a.condition}", "url": a.cause,
         "state": BAD}
        for a in firing
    ]
    problems += [
        {"text": f"{g.place}: {g.dead} dead, {g.cause}", "url": reverse("dashboard:failures"), "state": BAD}
        for g in culprits
    ]
    state = max((p["state"] for p in problems), key=SEVERITY.get, default=OK)
    by_name = {r.name: r for r in readings}
    tiles: dict[str, dict[str, Reading]] = {}
    for tile, name in TILE_CHECKS.items():
        block, figure = tile.split(".")
        tiles.setdefault(block, {})[figure] = by_name[name]
    return Summary(state, problems, tiles, window_minutes())
