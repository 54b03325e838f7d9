"""queries.history_series: latency (claims, webhook processing, outbox send: p50 and p99) and the
outbox backlog's age per bucket, from the hourly roll-ups (duration histograms, backlog
samples taken by the roll-up run) and the logs for what is not rolled up yet; and the
histogram quantile they rest on."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
import time_machine
from hypothesis import given, settings as hypothesis_settings, strategies as st

from idemdash.core import rollup
from idemdash.core.attempts import CLAIM_BOUNDS_MS, DURATION_BOUNDS_MS, percentile
from idemdash.dashboard import charts, queries
from receipts.models import Attempt, ClaimDurationHourly
from receipts.outbox.models import BacklogAgeHourly, OutboxAttempt, SendDurationHourly
from receipts.outbox.rollup import SENDS, sample_backlog_age
from tests.dashboard.build import outbox_message, webhook_event
from webhooks.models import ProcessingDurationHourly, WebhookAttempt

NOW = datetime(2026, 3, 10, 12, 7, 30, tzinfo=timezone.utc)
h, m = timedelta(hours=1), timedelta(minutes=1)


def bucket_of(ms: int) -> int:
    return next((i for i, bound in enumerate(DURATION_BOUNDS_MS) if ms < bound), len(DURATION_BOUNDS_MS))


@given(st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=300),
       st.sampled_from([0.5, 0.9, 0.99, 1.0]))
@hypothesis_settings(max_examples=200, deadline=None)
def test_a_histogram_quantile_is_the_bound_of_the_bucket_the_exact_quantile_falls_in(durations, q):
    histogram: dict[int, int] = {}
    for ms in durations:
        histogram[bucket_of(ms)] = histogram.get(bucket_of(ms), 0) + 1
    exact = sorted(durations)[max(0, math.ceil(q * len(durations)) - 1)]  # nearest rank
    assert percentile(histogram, q) == DURATION_BOUNDS_MS[min(bucket_of(exact), len(DURATION_BOUNDS_MS) - 1)]


def test_the_claim_histogram_reads_its_own_finer_bounds():
    # Bucket 1 of the claims' bounds holds 0.25 to 0.5 ms; of the others', 5 to 10 ms.
    assert percentile({1: 3}, 0.5, CLAIM_BOUNDS_MS) == 0.5
    assert percentile({1: 3}, 0.5) == 10


def test_an_empty_histogram_has_no_quantile_and_rows_without_a_duration_are_left_out():
    assert percentile({}, 0.5) is None
    assert percentile({-1: 40}, 0.5) is None
    assert percentile({-1: 40, 3: 1}, 0.99) == 50


def send(when: datetime, ms: int | None) -> None:
    OutboxAttempt.objects.create(key=f"k-{when:%H%M%S}-{ms}", action="http.post", number=1, fencing_token=1,
                                 outcome="sent", created_at=when, duration_ms=ms)


def claimed(when: datetime, ms: float | None, outcome: str = "claimed") -> None:
    Attempt.objects.create(scope="s", key=f"c-{when:%H%M%S%f}-{ms}-{outcome}", operation="op", outcome=outcome,
                           created_at=when, claim_ms=ms)


def processed(event, when: datetime, ms: int) -> None:
    WebhookAttempt.objects.create(event=event, number=1, outcome="completed", started_at=when, finished_at=when,
                                  duration_ms=ms)


@pytest.fixture
def timed_runs(db):
    """Sends and handler runs at known times: in the hour 10:00, 98 fast sends (20 ms) and 2
    slow ones (4 s); in 11:00, 10 sends of 300 ms and one without a duration; handler runs
    of 7 ms and 70 ms in 11:00; in 10:00 too, 95 claims of 0.4 ms and 5 of 30 ms, each
    with its settle (no claim duration); and in 12:00 (not rolled up yet), one send of 40 s."""
    for i in range(100):
        when = datetime(2026, 3, 10, 10, 10, i % 60, i, tzinfo=timezone.utc)
        claimed(when, 0.4 if i < 95 else 30)
        claimed(when, None, outcome="completed")
    for i in range(98):
        send(datetime(2026, 3, 10, 10, 5, i % 60, tzinfo=timezone.utc), 20)
    send(datetime(2026, 3, 10, 10, 50, tzinfo=timezone.utc), 4000)
    send(datetime(2026, 3, 10, 10, 51, tzinfo=timezone.utc), 4000)
    for i in range(10):
        send(datetime(2026, 3, 10, 11, 20, i, tzinfo=timezone.utc), 300)
    send(datetime(2026, 3, 10, 11, 21, tzinfo=timezone.utc), None)
    with time_machine.travel(datetime(2026, 3, 10, 11, 0, tzinfo=timezone.utc), tick=False):
        event = webhook_event("evt_timed", "completed")
    processed(event, datetime(2026, 3, 10, 11, 30, tzinfo=timezone.utc), 7)
    processed(event, datetime(2026, 3, 10, 11, 31, tzinfo=timezone.utc), 70)
    send(datetime(2026, 3, 10, 12, 6, tzinfo=timezone.utc), 40_000)


@pytest.mark.parametrize("rolled_up", [False, True], ids=["log only", "rolled up"])
def test_the_24h_history_gives_p50_and_p99_per_hour_the_same_from_the_log_and_the_rollup(timed_runs, rolled_up):
    if rolled_up:
        rollup.catch_up(NOW)
        assert SendDurationHourly.objects.filter(hour=datetime(2026, 3, 10, 10, tzinfo=timezone.utc)).exists()
        assert ProcessingDurationHourly.objects.exists()
        assert ClaimDurationHourly.objects.filter(bucket=-1).get().count == 100  # the settles
    rows = {r["start"].hour: r for r in queries.history_series(queries.WINDOWS["24h"], NOW)}
    # 98 of 100 sends at 20 ms (< 25 ms), 2 at 4 s (< 5 s): p50 ≤ 25 ms, p99 ≤ 5 s.
    assert (rows[10]["send_p50"], rows[10]["send_p99"], rows[10]["send_runs"]) == (25, 5000, 100)
    # The send without a duration is not a run of 0 ms.
    assert (rows[11]["send_p50"], rows[11]["send_p99"], rows[11]["send_runs"]) == (500, 500, 10)
    assert (rows[11]["processing_p50"], rows[11]["processing_p99"]) == (10, 100)
    assert (rows[12]["send_p50"], rows[12]["send_runs"]) == (60_000, 1)  # from the log, past the watermark
    assert rows[9]["send_p50"] is None and rows[9]["processing_runs"] == 0
    # 95 of 100 claims at 0.4 ms (< 0.5 ms), 5 at 30 ms (< 50 ms); their settles are no claims.
    assert (rows[10]["claim_p50"], rows[10]["claim_p99"], rows[10]["claim_runs"]) == (0.5, 50, 100)
    assert rows[11]["claim_p50"] is None


def test_the_7d_history_merges_hours_into_its_6_hour_buckets(timed_runs):
    rollup.catch_up(NOW)
    row = next(r for r in queries.history_series(queries.WINDOWS["7d"], NOW) if r["start"].hour == 6 and r["start"].day == 10)
    # 10:00 and 11:00 fall in 06:00-12:00: 110 sends, 98 at 20 ms: p50 ≤ 25 ms, p99 ≤ 5 s.
    assert (row["send_runs"], row["send_p50"], row["send_p99"]) == (110, 25, 5000)


def test_the_rollup_run_keeps_each_hours_worst_backlog_age(db):
    hour = datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
    with time_machine.travel(hour + 5 * m, tick=False):
        outbox_message("waiting-1")
    assert sample_backlog_age(hour + 5 * m) == 0
    assert sample_backlog_age(hour + 9 * m) == 240
    assert sample_backlog_age(hour + 7 * m) == 120  # an earlier clock: the hour keeps 240
    row = BacklogAgeHourly.objects.get()
    assert (row.hour, row.max_age_seconds, row.samples) == (hour, 240, 3)
    with time_machine.travel(hour + 10 * m, tick=False):
        rollup.catch_up()  # the schedule's run samples too
    assert BacklogAgeHourly.objects.get().max_age_seconds == 300

    rows = queries.history_series(queries.WINDOWS["24h"], hour + 10 * m)
    assert [r["backlog_age"] for r in rows if r["backlog_age"] is not None] == [300]
    assert rows[-1]["backlog_age"] == 300


def test_the_latency_and_backlog_charts_draw_the_history(timed_runs):
    rollup.catch_up(NOW)
    history = queries.history_series(queries.WINDOWS["24h"], NOW)
    figure = charts.latency_chart(history, "24h")
    lines = {t["name"]: t["y"] for t in figure["data"] if t.get("name") != "bucket"}
    assert set(lines) == {"claim p50", "claim p99", "processing p50", "processing p99", "send p50", "send p99"}
    assert list(lines["claim p50"])[-3:] == [0.5, None, None]
    assert figure["layout"]["yaxis"]["type"] == "log" and figure["empty"] is None
    assert list(lines["send p99"])[-3:] == [5000, 500, 60_000]
    # The roll-up run sampled the backlog at NOW: nothing waited.
    backlog = charts.backlog_age_chart(history, "24h")
    assert backlog["empty"] is None and list(backlog["data"][1]["y"])[-1] == 0
    assert backlog["data"][1]["mode"] == "lines+markers"
    assert [r["backlog_age"] for r in history].count(None) == len(history) - 1


def test_quiet_history_charts_say_why(db):
    history = queries.history_series(queries.WINDOWS["1h"], NOW)
    assert len(history) == 2  # the two hours the last hour touches
    assert charts.latency_chart(history, "1h")["empty"] == "No claims, webhook processing or outbox sends in the last 1h"
    assert charts.backlog_age_chart(history, "1h")["empty"] == (
        "No backlog sampled in the last 1h (the roll-up samples it every minute)")
