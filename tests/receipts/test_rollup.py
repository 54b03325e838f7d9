from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
import time_machine

from idemdash.core import rollup
from receipts import store
from receipts.models import Attempt, AttemptHourly
from receipts.rollup import ATTEMPTS

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 7, 30, tzinfo=timezone.utc)
SETTLED = datetime(2026, 3, 10, 12, 2, tzinfo=timezone.utc)  # NOW - SETTLE, to the minute
m, h = timedelta(minutes=1), timedelta(hours=1)


def claim_at(moment: datetime, key: str, request: object = None) -> None:
    """One claim request at `moment` (a replay when the key is already completed)."""
    with time_machine.travel(moment, tick=False):
        result = store.claim("client:t", key, "email.send", request if request is not None else {"k": key})
        if result.outcome == Attempt.Outcome.CLAIMED:
            store.complete(store.Held("client:t", key, result.token), response_status=201, body="{}")


def rolled() -> Counter:
    return Counter({(r.hour, r.outcome): r.count for r in AttemptHourly.objects.all()})


def logged(start: datetime, end: datetime) -> Counter:
    """The truth: attempts in (start, end] per outcome, from the log."""
    return Counter(Attempt.objects.filter(created_at__gt=start, created_at__lte=end).values_list("outcome", flat=True))


def counted(start: datetime, end: datetime) -> Counter:
    total: Counter = Counter()
    for _, outcome, n in ATTEMPTS.counts(start, end):
        total[outcome] += n
    return total


def test_a_run_counts_every_settled_hour_by_outcome():
    claim_at(NOW - 3 * h, "a")                       # 09:07: claimed + completed
    claim_at(NOW - 3 * h + 10 * m, "a")              # 09:17: replayed
    claim_at(NOW - 90 * m, "b")                      # 10:37
    claim_at(NOW - 6 * m, "c")                       # 12:01:30: this hour, settled
    claim_at(NOW - 4 * m, "d")                       # 12:03:30: not yet SETTLE old
    ATTEMPTS.roll_up(NOW)
    nine, ten = datetime(2026, 3, 10, 9, tzinfo=timezone.utc), datetime(2026, 3, 10, 10, tzinfo=timezone.utc)
    noon = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
    assert rolled() == Counter({(nine, "claimed"): 1, (nine, "completed"): 1, (nine, "replayed"): 1,
                                (ten, "claimed"): 1, (ten, "completed"): 1,
                                (noon, "claimed"): 1, (noon, "completed"): 1})  # the hour so far
    assert ATTEMPTS.rolled_until() == SETTLED
    assert counted(NOW - 24 * h, NOW) == logged(NOW - 24 * h, NOW)


def test_callers_that_waited_are_rolled_up_as_their_own_outcome_and_stay_concurrent_duplicates():
    from idemdash.dashboard import queries

    claim_at(NOW - 3 * h, "a")
    receipt = Attempt.objects.get(key="a", outcome="claimed").receipt_id
    for minute, ms in ((1, 40), (2, 900), (3, 15)):   # 09:08 to 09:10: three callers that waited
        Attempt.objects.create(receipt_id=receipt, scope="client:t", key="a", operation="email.send",
                               outcome=Attempt.Outcome.WAITED, waited_ms=ms, created_at=NOW - 3 * h + minute * m)
    before = queries.receipt_stats(queries.WINDOWS["24h"], NOW)
    ATTEMPTS.roll_up(NOW)
    nine = datetime(2026, 3, 10, 9, tzinfo=timezone.utc)
    assert rolled()[(nine, "waited")] == 3
    assert counted(NOW - 24 * h, NOW) == logged(NOW - 24 * h, NOW)
    after = queries.receipt_stats(queries.WINDOWS["24h"], NOW)
    assert after == before
    assert (after["concurrent_duplicates"], after["waited"], after["replayed"]) == (3, 3, 0)


def test_the_hour_so_far_is_counted_further_by_each_run():
    claim_at(NOW - 6 * m, "a")                       # 12:01:30
    ATTEMPTS.roll_up(NOW)
    claim_at(NOW - 4 * m, "b")                       # 12:03:30
    claim_at(NOW + 2 * m, "c")                       # 12:09:30
    ATTEMPTS.roll_up(NOW + 3 * m)                      # settled at 12:05: b, not c
    noon = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
    assert rolled()[(noon, "claimed")] == 2
    assert ATTEMPTS.rolled_until() == SETTLED + 3 * m
    for end in (NOW + 3 * m, NOW + 10 * m, SETTLED + 3 * m, NOW):
        assert counted(end - 24 * h, end) == logged(end - 24 * h, end), end


def test_an_attempt_is_rolled_up_only_once_it_is_the_settle_time_old():
    claim_at(datetime(2026, 3, 10, 11, 59, tzinfo=timezone.utc), "late")
    ATTEMPTS.roll_up(datetime(2026, 3, 10, 12, 3, tzinfo=timezone.utc))
    # A transaction that took its created_at at 11:59 may still be committing at 12:03.
    assert ATTEMPTS.rolled_until() == datetime(2026, 3, 10, 11, 58, tzinfo=timezone.utc)
    assert not AttemptHourly.objects.filter(hour__gte=datetime(2026, 3, 10, 11, tzinfo=timezone.utc)).exists()
    ATTEMPTS.roll_up(datetime(2026, 3, 10, 12, 5, tzinfo=timezone.utc))
    assert rolled()[(datetime(2026, 3, 10, 11, tzinfo=timezone.utc), "claimed")] == 1


def test_running_it_twice_does_not_double_count():
    for i in range(5):
        claim_at(NOW - (i + 2) * h, f"k{i}")
        claim_at(NOW - (i + 2) * h + m, f"k{i}")
    ATTEMPTS.roll_up(NOW)
    first = rolled()
    ATTEMPTS.roll_up(NOW)
    ATTEMPTS.catch_up(NOW + 10 * m)
    assert rolled() == first
    assert sum(first.values()) == Attempt.objects.count() == 15
    assert counted(NOW - 24 * h, NOW) == logged(NOW - 24 * h, NOW)


def test_a_row_that_commits_after_its_hour_was_rolled_up_is_counted_by_the_next_run():
    claim_at(NOW - 2 * h, "early")
    ATTEMPTS.roll_up(NOW)
    # Committed now, but with a created_at in an hour already rolled up (within REPAIR).
    claim_at(NOW - 2 * h + m, "straggler")
    ATTEMPTS.roll_up(NOW + m)
    assert counted(NOW - 24 * h, NOW + m) == logged(NOW - 24 * h, NOW + m)
    assert rolled()[(datetime(2026, 3, 10, 10, tzinfo=timezone.utc), "claimed")] == 2


def test_the_first_run_starts_at_the_oldest_attempt_and_each_run_is_bounded():
    for days in (10, 5, 1):
        claim_at(NOW - timedelta(days=days), f"d{days}")
    first = ATTEMPTS.roll_up(NOW, max_hours=48)
    assert first.start == rollup.floor_hour(NOW - timedelta(days=10))
    assert first.end == first.start + 48 * h and not first.caught_up
    # Figures are exact while the roll-up is behind: the log serves what it has not reached.
    assert counted(NOW - timedelta(days=30), NOW) == logged(NOW - timedelta(days=30), NOW)
    runs = ATTEMPTS.catch_up(NOW, max_hours=48)
    assert runs[-1].caught_up and ATTEMPTS.rolled_until() == SETTLED
    assert all(r.end - r.start <= 48 * h for r in runs)
    assert sum(rolled().values()) == Attempt.objects.count() == 6


def test_traffic_after_the_roll_up_is_counted_from_the_log():
    claim_at(NOW - 5 * h, "before")
    ATTEMPTS.roll_up(NOW)
    for i in range(3):
        claim_at(NOW + i * 20 * m, f"after{i}")  # 12:07, 12:27, 12:47
    claim_at(NOW + 40 * m, "after0")              # a replay
    later = NOW + 50 * m
    assert counted(later - 24 * h, later) == logged(later - 24 * h, later)
    assert counted(later - 24 * h, later)["claimed"] == 4


@pytest.mark.parametrize("state", ["empty", "behind", "caught up"])
def test_every_span_is_exact_whatever_the_state_of_the_roll_up(state):
    # Attempts on hour boundaries, just inside and outside window starts, and mid-hour.
    moments = [NOW - 24 * h, NOW - 24 * h + timedelta(microseconds=1), NOW - 24 * h - m,
               datetime(2026, 3, 9, 13, tzinfo=timezone.utc), datetime(2026, 3, 9, 12, 59, 59, tzinfo=timezone.utc),
               NOW - 7 * h, NOW - 3 * h - 7 * m, NOW - 70 * m, NOW - 30 * m, NOW - timedelta(days=3, minutes=7)]
    for i, moment in enumerate(moments):
        claim_at(moment, f"k{i}")
        claim_at(moment, f"k{i}")  # a replay in the same instant
    if state == "behind":
        ATTEMPTS.catch_up(NOW - 10 * h)
    elif state == "caught up":
        ATTEMPTS.catch_up(NOW)
    starts = [NOW - span for span in (h, 24 * h, timedelta(days=7), 15 * m)]
    starts += [datetime(2026, 3, 9, 12, tzinfo=timezone.utc), datetime(2026, 3, 9, 12, 59, 59, tzinfo=timezone.utc)]
    for start in starts:
        for end in (NOW, datetime(2026, 3, 10, 11, tzinfo=timezone.utc)):
            assert counted(start, end) == logged(start, end), (start, end)


def test_hourly_counts_put_each_attempt_in_its_hour():
    claim_at(NOW - 5 * h - 2 * m, "x")   # 07:05:30
    claim_at(NOW - 3 * h, "y")           # 09:07:30
    ATTEMPTS.roll_up(NOW)
    claim_at(NOW - 2 * m, "z")           # 12:05:30, from the log
    rows = Counter()
    for hour, outcome, n in ATTEMPTS.counts(NOW - 6 * h, NOW, outcome__in=("claimed",), by_hour=True):
        rows[hour.hour] += n
    assert rows == Counter({7: 1, 9: 1, 12: 1})


def test_a_count_that_fell_to_zero_is_removed_when_its_hour_is_recounted():
    claim_at(NOW - 2 * h, "gone")
    ATTEMPTS.roll_up(NOW)
    Attempt.objects.filter(key="gone").delete()
    ATTEMPTS.rewind(NOW - 2 * h)
    assert counted(NOW - 24 * h, NOW) == Counter()  # handed back to the log at once
    ATTEMPTS.catch_up(NOW)
    assert not AttemptHourly.objects.exists()


def test_rewinding_to_nothing_empties_the_roll_up_and_the_next_run_rebuilds_it():
    claim_at(NOW - 30 * h, "old")
    ATTEMPTS.catch_up(NOW)
    before = rolled()
    ATTEMPTS.rewind(None)
    assert ATTEMPTS.rolled_until() is None and not AttemptHourly.objects.exists()
    ATTEMPTS.catch_up(NOW)
    assert rolled() == before


def test_the_watermark_never_moves_back_on_a_slow_clock():
    claim_at(NOW - 6 * m, "a")  # 12:01:30, in the hour the watermark falls in
    ATTEMPTS.roll_up(NOW)
    ATTEMPTS.roll_up(NOW - 5 * h)
    assert ATTEMPTS.rolled_until() == SETTLED
    # Nor is the watermark's own hour counted back to the slow clock's instant.
    assert rolled()[(datetime(2026, 3, 10, 12, tzinfo=timezone.utc), "claimed")] == 1
    assert counted(NOW - 24 * h, NOW) == logged(NOW - 24 * h, NOW)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_take_turns_and_count_once():
    import threading

    from django.db import connections

    for i in range(20):
        claim_at(NOW - timedelta(days=2) + i * 7 * m, f"k{i}")
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            start.wait(10)
            ATTEMPTS.catch_up(NOW, max_hours=6)
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sum(rolled().values()) == Attempt.objects.count() == 40
    assert ATTEMPTS.rolled_until() == SETTLED


def test_the_observers_notes_roll_up_by_route_and_kind_and_outlive_their_purge(settings):
    from receipts import coverage, retention
    from receipts.models import ObservedRequest
    from receipts.rollup import OBSERVED

    settings.RECEIPTS_OBSERVE_WINDOW_SECONDS = 600

    def note(moment: datetime, route: str, fingerprint: str, skipped: str = "") -> None:
        ObservedRequest.objects.create(method="POST", route=route, caller="anonymous", fingerprint=fingerprint,
                                       skipped=skipped, at=moment)

    tie = NOW - 3 * h
    note(tie, "refund/", "f1")
    note(tie, "refund/", "f1")                    # the same moment: the later id is the duplicate
    note(tie + 9 * m, "refund/", "f1")            # within the window of the first two
    note(tie + 30 * m, "refund/", "f1")           # 21 minutes after the last: a first again
    note(tie + 31 * m, "refund/", "f2")
    note(tie + 32 * m, "notes/", "f1")            # another route: a first
    note(tie + 33 * m, "refund/", "", skipped="too large")
    expected = {("POST", "refund/"): {"requests": 6, "duplicates": 2, "skipped": 1},
                ("POST", "notes/"): {"requests": 1, "duplicates": 0, "skipped": 0}}
    with time_machine.travel(NOW, tick=False):
        assert coverage.unprotected_counts(NOW - 24 * h) == expected  # from the notes alone
        OBSERVED.roll_up(NOW)
        assert coverage.unprotected_counts(NOW - 24 * h) == expected  # from the roll-up
    with time_machine.travel(NOW + 25 * h, tick=False):
        retention.purge()
        assert not ObservedRequest.objects.exists()
        assert coverage.unprotected_counts(NOW - 24 * h) == expected  # the notes are gone, the counts stay
