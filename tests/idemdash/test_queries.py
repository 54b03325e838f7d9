from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import time_machine

from idemdash.dashboard import queries
from idemdash.core import rollup as core_rollup
from receipts import rollup, store
from receipts.models import Attempt, AttemptHourly, ObservedRequest
from tests.dashboard.build import EXPECTED_STATS, known_traffic

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 2, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize("name", ["1h", "24h", "7d", "30d"])
def test_receipt_stats_match_known_traffic_in_every_window(name):
    known_traffic(NOW)
    assert queries.receipt_stats(queries.WINDOWS[name], NOW) == EXPECTED_STATS[name]


def test_the_overview_document_has_the_window_and_every_block():
    known_traffic(NOW)
    doc = queries.overview_stats(queries.WINDOWS["24h"], NOW)
    assert set(doc) == {"window", "receipts", "webhooks", "outbox", "unprotected", "fresh_keys"}
    assert (doc["window"], doc["receipts"]) == ("24h", EXPECTED_STATS["24h"])
    # No webhook, outbox, unprotected or fresh-key traffic: every figure is there, and zero.
    for block in ("webhooks", "outbox", "unprotected", "fresh_keys"):
        assert doc[block] == {field: 0 for field in queries.FIELD_DOCS[block]}


def test_an_empty_log_has_zero_figures_and_no_division_by_zero():
    stats = queries.receipt_stats(queries.WINDOWS["1h"], NOW)
    assert stats["requests"] == 0 and stats["duplicate_rate"] == 0.0


def test_settle_and_release_attempts_are_not_claim_requests():
    with time_machine.travel(NOW - timedelta(minutes=1), tick=False):
        c = store.claim("s", "k", "email.send", {})
        store.fail(store.Held("s", "k", c.token), error="x")
        store.release(store.Receipt.objects.get(key="k"), actor="ops")
    assert Attempt.objects.count() == 3
    assert queries.receipt_stats(queries.WINDOWS["1h"], NOW)["requests"] == 1


def test_every_documented_field_is_in_the_block_and_back():
    assert set(queries.FIELD_DOCS["receipts"]) == set(queries.receipt_stats(queries.WINDOWS["1h"], NOW))


def _noted(at: datetime, fingerprint: str, route: str = "notes/") -> None:
    ObservedRequest.objects.create(method="POST", route=route, caller="anonymous", fingerprint=fingerprint, at=at)


def test_unprotected_stats_count_the_noted_requests_and_the_would_be_duplicates_among_them():
    _noted(NOW - timedelta(minutes=50), "a")
    _noted(NOW - timedelta(minutes=45), "a")  # the same request 5 minutes later: a would-be duplicate
    _noted(NOW - timedelta(minutes=44), "b")
    _noted(NOW - timedelta(minutes=20), "b", route="refunds/")  # another route: not a repeat
    assert queries.unprotected_stats(queries.WINDOWS["1h"], NOW) == {
        "requests": 4, "duplicates": 1, "duplicate_rate": 0.25}


def test_a_request_that_repeats_one_from_before_the_window_is_a_duplicate_in_it():
    _noted(NOW - timedelta(minutes=62), "a")
    _noted(NOW - timedelta(minutes=58), "a")
    assert queries.unprotected_stats(queries.WINDOWS["1h"], NOW) == {
        "requests": 1, "duplicates": 1, "duplicate_rate": 1.0}


def test_the_unprotected_series_puts_each_note_in_its_bucket_and_adds_up_to_the_stats():
    _noted(NOW - timedelta(minutes=50), "a")  # 11:12:30, the 11:10 bucket
    _noted(NOW - timedelta(minutes=49), "a")
    _noted(NOW - timedelta(minutes=1), "c")  # 12:01:30, the bucket in progress
    window = queries.WINDOWS["1h"]
    series = queries.unprotected_series(window, NOW)
    assert len(series) == 13 and all(set(r) >= {"requests", "duplicates"} for r in series)
    by_start = {(r["start"].hour, r["start"].minute): (r["requests"], r["duplicates"]) for r in series}
    assert by_start[11, 10] == (2, 1) and by_start[12, 0] == (1, 0)
    stats = queries.unprotected_stats(window, NOW)
    assert (sum(r["requests"] for r in series), sum(r["duplicates"] for r in series)) == (
        stats["requests"], stats["duplicates"])


def test_the_fresh_key_series_puts_each_retry_in_its_bucket_and_adds_up_to_the_stats(settings):
    settings.RECEIPTS_OPERATIONS = {"refund.*": {"fresh_key": "refuse"}}
    for minutes, key, operation in ((50, "k1", "email.send"), (49, "k2", "email.send"),
                                    (2, "k3", "refund.create"), (1, "k4", "refund.create")):
        with time_machine.travel(NOW - timedelta(minutes=minutes), tick=False):
            store.claim("client:app", key, operation, {"same": operation})
    window = queries.WINDOWS["1h"]
    series = queries.fresh_key_series(window, NOW)
    by_start = {(r["start"].hour, r["start"].minute): (r["ran_again"], r["refused"]) for r in series}
    assert by_start[11, 10] == (1, 0) and by_start[12, 0] == (0, 1)
    assert queries.fresh_key_stats(window, NOW) == {"retries": 2, "ran_again": 1, "refused": 1} == {
        "retries": sum(r["ran_again"] + r["refused"] for r in series),
        "ran_again": sum(r["ran_again"] for r in series), "refused": sum(r["refused"] for r in series)}


def test_parse_window_defaults_to_24h_and_refuses_anything_else():
    assert queries.parse_window(None).name == "24h"
    assert queries.parse_window("7d").span == timedelta(days=7)
    with pytest.raises(queries.BadWindow):
        queries.parse_window("2h")


def test_the_series_has_every_bucket_and_adds_up_to_the_stats():
    known_traffic(NOW)
    window = queries.WINDOWS["1h"]
    series = queries.receipt_series(window, NOW)
    starts = [row["start"] for row in series]
    assert starts[0] == datetime(2026, 3, 10, 11, 0, tzinfo=timezone.utc)
    assert starts[-1] == datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)
    assert all(b - a == timedelta(minutes=5) for a, b in zip(starts, starts[1:]))
    stats = queries.receipt_stats(window, NOW)
    assert sum(r["requests"] for r in series) == stats["requests"]
    assert sum(r["concurrent"] for r in series) == stats["concurrent_duplicates"]
    # a2's two 409s came 20 minutes before NOW (11:42:30): the 11:40 bucket.
    bucket = next(r for r in series if r["start"].minute == 40)
    assert (bucket["claimed"], bucket["in_progress"]) == (1, 2)


def test_the_30_day_series_has_daily_buckets_with_the_takeover_in_its_day():
    known_traffic(NOW)
    series = queries.receipt_series(queries.WINDOWS["30d"], NOW)
    assert len(series) == 31
    today = series[-1]
    assert today["start"] == datetime(2026, 3, 10, tzinfo=timezone.utc)
    assert today["lease_takeover"] == 1 and today["retried_after_failure"] == 1
    assert sum(r["requests"] for r in series) == EXPECTED_STATS["30d"]["requests"]


@pytest.mark.parametrize("name", ["24h", "7d", "30d"])
def test_the_series_is_the_same_from_the_roll_up_as_from_the_log(name):
    known_traffic(NOW)
    window = queries.WINDOWS[name]
    from_log = queries.receipt_series(window, NOW)
    core_rollup.catch_up(NOW)
    assert AttemptHourly.objects.exists()
    assert queries.receipt_series(window, NOW) == from_log
    # Traffic after the roll-up ran, in an hour it has not reached, and late in one it has.
    later = NOW + timedelta(minutes=20)
    with time_machine.travel(later, tick=False):
        store.claim("s", "after", "email.send", {})
    with time_machine.travel(NOW - timedelta(hours=2), tick=False):
        store.claim("s", "straggler", "email.send", {})
    rollup.ATTEMPTS.roll_up(later)
    series = queries.receipt_series(window, later)
    assert sum(b["claimed"] for b in series) == sum(b["claimed"] for b in from_log) + 2
    assert queries.receipt_stats(window, later)["claimed"] == EXPECTED_STATS[name]["claimed"] + 2


def test_stuck_receipts_are_the_processing_ones_past_their_lease_oldest_first():
    with time_machine.travel(NOW - timedelta(minutes=30), tick=False):
        store.claim("s", "old", "email.send", {})
    with time_machine.travel(NOW - timedelta(minutes=10), tick=False):
        store.claim("s", "newer", "email.send", {})
    with time_machine.travel(NOW, tick=False):
        store.claim("s", "live", "email.send", {})
    assert [r.key for r in queries.stuck_receipts(NOW)] == ["old", "newer"]


def test_the_dashboard_page_documents_every_figure():
    from pathlib import Path

    from django.conf import settings

    page = (Path(settings.BASE_DIR) / "docs" / "dashboard.md").read_text()
    for block, fields in queries.FIELD_DOCS.items():
        for field in fields:
            assert f"`{block}.{field}`" in page, f"{block}.{field}"


# --- list totals and duplicate counts --------------------------------------------------------


def _receipts(n: int, prefix: str = "t") -> None:
    from django.utils import timezone as dj_tz

    from receipts.models import Receipt

    now = dj_tz.now()
    Receipt.objects.bulk_create(
        Receipt(scope="client:shop", key=f"{prefix}{i}", operation="payment.create", fingerprint="x",
                status="completed", created_at=now, updated_at=now, expires_at=now + timedelta(days=1))
        for i in range(n)
    )


def test_a_total_under_the_cap_is_exact_and_follows_the_filter():
    from receipts.models import Receipt

    _receipts(7, "a")
    _receipts(3, "b")
    assert queries.list_total(Receipt.objects.filter(key__startswith="a"), cap=20) == queries.Total(7)
    assert queries.list_total(Receipt.objects.all(), cap=10) == queries.Total(10)


def test_a_total_past_the_cap_is_marked_as_not_exact(on_postgres, django_assert_max_num_queries):
    from receipts.models import Receipt

    _receipts(30)
    with django_assert_max_num_queries(7):  # the bounded count (in a savepoint with its timeout), an EXPLAIN
        total = queries.list_total(Receipt.objects.all(), cap=10)
    assert (total.count, total.exact) == (10, False)
    # SQLite has no estimate; PostgreSQL's, on an unanalysed table, is shown only if clearly above 10.
    assert total.estimate is None or total.estimate > 15


def test_past_the_cap_postgresql_shows_the_planners_estimate(on_postgres):
    from django.db import connection

    from receipts.models import Receipt

    if not on_postgres:
        pytest.skip("the planner's estimate is PostgreSQL's")
    _receipts(300)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE receipts_receipt")
    total = queries.list_total(Receipt.objects.all(), cap=10)
    assert (total.count, total.exact) == (10, False)
    assert 250 <= total.estimate <= 350


def test_a_count_that_runs_out_of_time_gives_way_to_the_estimate(on_postgres, monkeypatch):
    from receipts.models import Receipt

    if not on_postgres:
        pytest.skip("statement_timeout is PostgreSQL's")
    _receipts(30)
    monkeypatch.setattr(queries, "TOTAL_BUDGET_MS", 50)
    slow = Receipt.objects.extra(where=["pg_sleep(0.01) IS NOT NULL"])  # 10 ms a row: 300 ms in all
    total = queries.list_total(slow, cap=1000)
    assert (total.count, total.exact) == (0, False)
    # The timeout does not outlive the count: the next statement runs as long as it needs.
    assert len(list(Receipt.objects.extra(where=["pg_sleep(0.01) IS NOT NULL"])[:10])) == 10


def test_duplicate_counts_group_replays_409s_and_422s_per_receipt(django_assert_num_queries):
    from tests.dashboard.build import completed

    a = completed("dup-a")
    b = completed("dup-b")
    store.claim("client:shop", "dup-a", "payment.create", {"key": "dup-a"})  # replay
    store.claim("client:shop", "dup-a", "payment.create", {"key": "dup-a"})  # replay
    store.claim("client:shop", "dup-a", "payment.create", {"other": 1})  # 422
    claim = store.claim("client:shop", "busy", "payment.create", {"key": "busy"})
    store.claim("client:shop", "busy", "payment.create", {"key": "busy"})  # 409
    with django_assert_num_queries(1):
        counts = queries.duplicate_counts([a.pk, b.pk, claim.receipt.pk])
    assert counts == {
        a.pk: {"replays": 2, "concurrent": 0, "mismatches": 1},
        b.pk: {"replays": 0, "concurrent": 0, "mismatches": 0},
        claim.receipt.pk: {"replays": 0, "concurrent": 1, "mismatches": 0},
    }


def test_the_pager_words_for_each_kind_of_total():
    from idemdash.dashboard.templatetags.idemdash_tags import total_of

    assert total_of(queries.Total(1234)) == "1,234"
    assert total_of(queries.Total(10_000, False, 2_345_678)) == "more than 10,000 (about 2.3 million, estimated)"
    assert total_of(queries.Total(10_000, False, None)) == "more than 10,000"
    assert total_of(queries.Total(0, False, 562_300)) == "about 562,000 (estimated)"
