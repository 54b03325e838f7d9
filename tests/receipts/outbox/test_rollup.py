"""receipts.outbox.rollup: outbox messages enqueued and attempts by outcome rolled up by hour,
and the overview's outbox figures and flow chart read from them. The machinery is
receipts.rollup's (tests/receipts/test_rollup.py); these prove that the outbox is counted
exactly through it."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.db.models import F

from idemdash.core import retention as core_retention
from idemdash.core import rollup
from idemdash.dashboard import queries
from receipts import retention, tasks
from receipts.outbox import store
from receipts.outbox.models import OutboxAttempt, OutboxAttemptHourly, OutboxMessage, OutboxMessageHourly
from receipts.outbox.rollup import ATTEMPTS, ENQUEUED

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 7, 30, tzinfo=timezone.utc)
SETTLED = datetime(2026, 3, 10, 12, 2, tzinfo=timezone.utc)  # NOW - SETTLE, to the minute
m, h, d = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)
Outcome = OutboxAttempt.Outcome
OUTCOMES = [Outcome.SENT, Outcome.DEAD, Outcome.STALE, Outcome.RETRY]
CHARTED = {"sent": Outcome.SENT, "died": Outcome.DEAD, "stale": Outcome.STALE}


def enqueue(key: str, when: datetime) -> OutboxMessage:
    with time_machine.travel(when, tick=False):
        return store.enqueue("http.post", {"url": "http://127.0.0.1:9/hook", "json": {}}, key).message


def attempt(key: str, outcome: str, when: datetime) -> None:
    """One logged try of message `key`, as the drainer's settle writes it."""
    OutboxAttempt.objects.create(
        key=key, action="http.post", number=1, fencing_token=1, outcome=outcome, created_at=when
    )


def enqueued(start: datetime, end: datetime) -> int:
    """The truth: messages created in (start, end], from the table."""
    return OutboxMessage.objects.filter(created_at__gt=start, created_at__lte=end).count()


def outcomes(start: datetime, end: datetime) -> Counter:
    """The truth: attempts in (start, end] by outcome, from the table."""
    return Counter(OutboxAttempt.objects.filter(created_at__gt=start, created_at__lte=end).values_list("outcome", flat=True))


def counted_enqueued(start: datetime, end: datetime) -> int:
    return sum(n for _, n in ENQUEUED.counts(start, end))


def counted_outcomes(start: datetime, end: datetime) -> Counter:
    total: Counter = Counter()
    for _, outcome, n in ATTEMPTS.counts(start, end):
        total[outcome] += n
    return total


def rolled() -> tuple[Counter, Counter]:
    return (
        Counter({r.hour: r.count for r in OutboxMessageHourly.objects.all()}),
        Counter({(r.hour, r.outcome): r.count for r in OutboxAttemptHourly.objects.all()}),
    )


MOMENTS = [
    NOW - 24 * h, NOW - 24 * h + timedelta(microseconds=1), NOW - 24 * h - m,
    datetime(2026, 3, 9, 13, tzinfo=timezone.utc), datetime(2026, 3, 9, 12, 59, 59, tzinfo=timezone.utc),
    NOW - 7 * h, NOW - 3 * h - 7 * m, NOW - 70 * m, NOW - 30 * m, NOW - 4 * m,
    NOW - 3 * d - 7 * m, NOW - 7 * d + m, NOW - 10 * d, NOW - 29 * d,
    # The watermarks of the "caught up" and "behind" roll-ups, to the microsecond.
    SETTLED, datetime(2026, 3, 10, 2, 2, tzinfo=timezone.utc),
]


def traffic() -> None:
    """Messages on hour boundaries, just inside and outside window starts, mid-hour and across
    the 30 days; each followed by an attempt of every outcome in turn and one that sent it."""
    for i, moment in enumerate(MOMENTS):
        enqueue(f"msg_{i}", moment)
        attempt(f"msg_{i}", OUTCOMES[i % len(OUTCOMES)], moment)
        attempt(f"msg_{i}", Outcome.SENT, moment + m)


def windows_exact(now: datetime) -> None:
    for name, window in queries.WINDOWS.items():
        start = now - window.span
        truth, truth_outcomes = enqueued(start, now), outcomes(start, now)
        assert counted_enqueued(start, now) == truth, name
        assert counted_outcomes(start, now) == truth_outcomes, name
        stats = queries.outbox_stats(window, now)
        assert (stats["enqueued"], stats["sent"]) == (truth, truth_outcomes[Outcome.SENT]), name
        series = queries.flow_series(window, now)
        assert sum(b["enqueued"] for b in series) == truth, name
        for series_name, outcome in CHARTED.items():
            assert sum(b[series_name] for b in series) == truth_outcomes[outcome], (name, series_name)


@pytest.mark.parametrize("state", ["empty", "behind", "caught up"])
def test_every_window_counts_what_the_tables_have_whatever_the_state_of_the_roll_ups(state):
    traffic()
    behind = datetime(2026, 3, 10, 2, 2, tzinfo=timezone.utc)
    for rolled_up in (ENQUEUED, ATTEMPTS):
        if state == "behind":
            rolled_up.catch_up(NOW - 10 * h)
            assert rolled_up.rolled_until() == behind
        elif state == "caught up":
            rolled_up.catch_up(NOW)
            assert rolled_up.rolled_until() == SETTLED
    messages, attempts = rolled()
    assert (state == "empty") == (not messages) == (not attempts)
    windows_exact(NOW)
    # Spans that end before the watermark, or start and end mid-hour, too.
    for start in (NOW - 15 * m, datetime(2026, 3, 9, 12, tzinfo=timezone.utc), NOW - 7 * d):
        for end in (NOW, datetime(2026, 3, 10, 11, tzinfo=timezone.utc), NOW - 3 * h - 6 * m):
            assert counted_enqueued(start, end) == enqueued(start, end), (start, end)
            assert counted_outcomes(start, end) == outcomes(start, end), (start, end)


def test_the_series_puts_each_message_and_attempt_in_its_bucket_from_the_roll_ups_as_from_the_tables():
    traffic()
    from_tables = {name: queries.flow_series(window, NOW) for name, window in queries.WINDOWS.items()}
    assert sum(b["enqueued"] for b in from_tables["30d"]) == len(MOMENTS)
    rollup.catch_up(NOW)
    for name, window in queries.WINDOWS.items():
        assert queries.flow_series(window, NOW) == from_tables[name], name


def test_a_run_counts_messages_by_hour_and_attempts_by_outcome_and_leaves_the_unsettled_minutes_to_the_tables():
    enqueue("a", NOW - 3 * h)           # 09:07:30
    enqueue("b", NOW - 3 * h + 20 * m)  # 09:27:30
    attempt("a", Outcome.RETRY, NOW - 3 * h + m)
    attempt("a", Outcome.SENT, NOW - 3 * h + 2 * m)
    enqueue("c", NOW - 6 * m)           # 12:01:30, settled
    attempt("c", Outcome.DEAD, NOW - 6 * m)
    enqueue("d", NOW - 4 * m)           # 12:03:30, not yet SETTLE old
    attempt("d", Outcome.STALE, NOW - 4 * m)
    ENQUEUED.roll_up(NOW)
    ATTEMPTS.roll_up(NOW)
    nine, noon = datetime(2026, 3, 10, 9, tzinfo=timezone.utc), datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
    assert rolled() == (
        Counter({nine: 2, noon: 1}),
        Counter({(nine, "retry"): 1, (nine, "sent"): 1, (noon, "dead"): 1}),
    )
    assert ENQUEUED.rolled_until() == ATTEMPTS.rolled_until() == SETTLED
    stats = queries.outbox_stats(queries.WINDOWS["24h"], NOW)
    assert (stats["enqueued"], stats["sent"]) == (4, 1)
    windows_exact(NOW)


def test_a_message_or_attempt_committed_after_its_hour_was_rolled_up_is_counted_by_the_next_run():
    enqueue("early", NOW - 2 * h)
    attempt("early", Outcome.SENT, NOW - 2 * h)
    rollup.catch_up(NOW)
    # Committed now, with a created_at in an hour already rolled up (within REPAIR): its
    # transaction took its time before the run, and committed after it.
    enqueue("straggler", NOW - 2 * h + m)
    attempt("straggler", Outcome.SENT, NOW - 2 * h + m)
    rollup.catch_up(NOW + m)
    ten = datetime(2026, 3, 10, 10, tzinfo=timezone.utc)
    messages, attempts = rolled()
    assert messages[ten] == 2 and attempts[(ten, "sent")] == 2
    windows_exact(NOW + m)


def test_running_them_twice_does_not_double_count():
    traffic()
    rollup.catch_up(NOW)
    first = rolled()
    rollup.catch_up(NOW)
    assert rolled() == first
    assert sum(first[0].values()) == OutboxMessage.objects.filter(created_at__lt=SETTLED).count()
    assert sum(first[1].values()) == OutboxAttempt.objects.filter(created_at__lt=SETTLED).count()
    rollup.catch_up(NOW + 10 * m)  # settled at 12:12: every row, each once
    assert sum(rolled()[0].values()) == OutboxMessage.objects.count()
    assert sum(rolled()[1].values()) == OutboxAttempt.objects.count()


def test_purging_messages_and_attempts_leaves_the_hours_they_were_counted_in(settings):
    settings.OUTBOX_ATTEMPT_RETENTION_DAYS = 2
    traffic()
    # Sent when enqueued: the sent messages' retention (7 days) purges those 10 and 29 days old.
    OutboxMessage.objects.update(status=OutboxMessage.Status.SENT, sent_at=F("created_at"))
    rollup.catch_up(NOW)
    before = rolled()
    figures = {name: queries.outbox_stats(window, NOW) for name, window in queries.WINDOWS.items()}
    series = {name: queries.flow_series(window, NOW) for name, window in queries.WINDOWS.items()}
    purgers = [p for p in core_retention.installed_purgers() if p.name in ("outbox.sent", "outbox.attempts")]
    deleted = {r.name: r.deleted for r in retention.purge(now=NOW, purgers=purgers)}
    assert deleted == {"outbox.sent": 2, "outbox.attempts": 8}  # 2 messages; 2 attempts of 4 messages
    assert rolled() == before
    # Later runs recount only the last hours, never the purged ones.
    rollup.catch_up(NOW + h)
    old = NOW - 2 * d
    assert {k: n for k, n in rolled()[0].items() if k < old} == {k: n for k, n in before[0].items() if k < old}
    assert {k: n for k, n in rolled()[1].items() if k[0] < old} == {k: n for k, n in before[1].items() if k[0] < old}
    # A window's partial first hour is read from the tables: every window keeps its figures
    # but the 7-day one, whose first hour held the two attempts of the message enqueued 7 days
    # ago (one of them sent). The default attempt retention (35 days) outlasts every window.
    for name in ("1h", "24h", "30d"):
        assert queries.outbox_stats(queries.WINDOWS[name], NOW) == figures[name], name
        assert queries.flow_series(queries.WINDOWS[name], NOW) == series[name], name
    assert queries.outbox_stats(queries.WINDOWS["7d"], NOW)["sent"] == figures["7d"]["sent"] - 1
    # Without the roll-ups, the 30-day window would have lost the purged messages and the
    # sent attempts among the purged ones (both of the message enqueued 10 days ago).
    assert enqueued(NOW - 30 * d, NOW) == figures["30d"]["enqueued"] - 2
    assert outcomes(NOW - 30 * d, NOW)[Outcome.SENT] == figures["30d"]["sent"] - 5


def test_roll_up_rows_have_their_own_retention(settings):
    settings.OUTBOX_MESSAGE_ROLLUP_RETENTION_DAYS = 31
    settings.OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS = 35
    for key, when in (("old", NOW - 40 * d), ("middle", NOW - 33 * d), ("kept", NOW - 29 * d)):
        enqueue(key, when)
        attempt(key, Outcome.SENT, when)
    rollup.catch_up(NOW)
    purgers = [p for p in core_retention.installed_purgers() if p.name in ("outbox.message_rollups", "outbox.attempt_rollups")]
    deleted = {r.name: r.deleted for r in retention.purge(now=NOW, purgers=purgers)}
    assert deleted == {"outbox.message_rollups": 2, "outbox.attempt_rollups": 1}
    assert list(OutboxMessageHourly.objects.values_list("hour", flat=True)) == [rollup.floor_hour(NOW - 29 * d)]
    assert sorted(OutboxAttemptHourly.objects.values_list("hour", flat=True)) == [
        rollup.floor_hour(NOW - 33 * d), rollup.floor_hour(NOW - 29 * d)]


@time_machine.travel(NOW, tick=False)
def test_rebuild_recounts_the_outbox_roll_ups_from_their_tables():
    traffic()
    call_command("rollup", stdout=StringIO())
    truth = rolled()
    assert truth[0] and truth[1]
    OutboxMessageHourly.objects.update(count=99)  # roll-ups gone wrong
    OutboxAttemptHourly.objects.update(count=99)
    out = StringIO()
    call_command("rollup", "--rebuild", stdout=out)
    assert rolled() == truth
    assert "outbox.messages:" in out.getvalue() and "outbox.attempts:" in out.getvalue()


@time_machine.travel(NOW, tick=False)
def test_the_scheduled_roll_up_and_rewind_serve_the_outbox_too():
    enqueue("a", NOW - 20 * d)
    attempt("a", Outcome.SENT, NOW - 20 * d)
    runs = tasks.roll_up()
    assert {"outbox.messages", "outbox.attempts"} <= {r["name"] for r in runs}
    assert OutboxMessageHourly.objects.get().count == OutboxAttemptHourly.objects.get().count == 1
    # A bulk load of past rows (the seeder) rewinds every roll-up, and the next run recounts
    # the hours handed back.
    enqueue("b", NOW - 20 * d + m)
    attempt("b", Outcome.SENT, NOW - 20 * d + m)
    rollup.rewind(NOW - 30 * d)
    assert ENQUEUED.rolled_until() == ATTEMPTS.rolled_until() == rollup.floor_hour(NOW - 30 * d)
    rollup.catch_up()
    assert OutboxMessageHourly.objects.get().count == OutboxAttemptHourly.objects.get().count == 2
