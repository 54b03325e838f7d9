"""webhooks.rollup: webhook deliveries rolled up by hour and kind, and the overview's webhook
figures read from it. The machinery is receipts.rollup's (tests/receipts/test_rollup.py);
these prove that deliveries are counted exactly through it."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command

from idemdash.core import retention as core_retention
from idemdash.core import rollup
from idemdash.dashboard import queries
from receipts import retention, tasks
from receipts.models import AttemptHourly
from tests.webhooks.conftest import make_endpoint
from webhooks.models import DeliveryHourly, WebhookDelivery, WebhookEvent
from webhooks.receive import store_delivery
from webhooks.rollup import DELIVERIES
from webhooks.verify import VerifiedDelivery

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 7, 30, tzinfo=timezone.utc)
SETTLED = datetime(2026, 3, 10, 12, 2, tzinfo=timezone.utc)  # NOW - SETTLE, to the minute
m, h, d = timedelta(minutes=1), timedelta(hours=1), timedelta(days=1)


@pytest.fixture
def endpoint():
    return make_endpoint("ep", "stripe", "whsec_rollup_000000000000")


def deliver(endpoint, key: str, when: datetime, payload: object = None) -> None:
    """One delivery of event `key` at `when`: its first, or a redelivery (a payload other
    than the first one's is a mismatch)."""
    store_delivery(endpoint, VerifiedDelivery(0, payload or {"id": key}, key, "a.b", key, ""), now=when)


def kinds(start: datetime, end: datetime) -> Counter:
    """The truth: deliveries in (start, end] by (duplicate, payload_matches), from the table."""
    rows = WebhookDelivery.objects.filter(received_at__gt=start, received_at__lte=end)
    return Counter(rows.values_list("duplicate", "payload_matches"))


def counted(start: datetime, end: datetime) -> Counter:
    total: Counter = Counter()
    for _, duplicate, payload_matches, n in DELIVERIES.counts(start, end):
        total[(duplicate, payload_matches)] += n
    return total


def rolled() -> Counter:
    return Counter({(r.hour, r.duplicate, r.payload_matches): r.count for r in DeliveryHourly.objects.all()})


def traffic(endpoint) -> None:
    """Deliveries on hour boundaries, just inside and outside window starts, mid-hour, and
    across the 30 days; redeliveries with the same and with a different payload."""
    moments = [NOW - 24 * h, NOW - 24 * h + timedelta(microseconds=1), NOW - 24 * h - m,
               datetime(2026, 3, 9, 13, tzinfo=timezone.utc), datetime(2026, 3, 9, 12, 59, 59, tzinfo=timezone.utc),
               NOW - 7 * h, NOW - 3 * h - 7 * m, NOW - 70 * m, NOW - 30 * m, NOW - 4 * m,
               NOW - 3 * d - 7 * m, NOW - 7 * d + m, NOW - 29 * d,
               # The watermarks of the "caught up" and "behind" roll-ups, to the microsecond.
               SETTLED, datetime(2026, 3, 10, 2, 2, tzinfo=timezone.utc)]
    for i, moment in enumerate(moments):
        deliver(endpoint, f"evt_{i}", moment)
        deliver(endpoint, f"evt_{i}", moment + m)  # a redelivery, same payload
        if i % 3 == 0:
            deliver(endpoint, f"evt_{i}", moment + 2 * m, {"changed": i})  # payload differs


def windows_exact(now: datetime) -> None:
    for name, window in queries.WINDOWS.items():
        start = now - window.span
        truth = kinds(start, now)
        assert counted(start, now) == truth, name
        stats = queries.webhook_stats(window, now)
        assert stats["deliveries"] == sum(truth.values()), name
        assert stats["events"] == truth[(False, True)], name
        assert stats["payload_mismatches"] == truth[(True, False)], name
        series = queries.flow_series(window, now)
        assert sum(b["deliveries"] for b in series) == sum(truth.values()), name
        assert sum(b["events"] for b in series) == truth[(False, True)], name


@pytest.mark.parametrize("state", ["empty", "behind", "caught up"])
def test_every_window_counts_what_the_table_has_whatever_the_state_of_the_roll_up(endpoint, state):
    traffic(endpoint)
    if state == "behind":
        DELIVERIES.catch_up(NOW - 10 * h)
        assert DELIVERIES.rolled_until() == datetime(2026, 3, 10, 2, 2, tzinfo=timezone.utc)
    elif state == "caught up":
        DELIVERIES.catch_up(NOW)
        assert DELIVERIES.rolled_until() == SETTLED
    assert (state == "empty") == (not DeliveryHourly.objects.exists())
    windows_exact(NOW)
    # Spans that end before the watermark, or start and end mid-hour, too.
    for start in (NOW - 15 * m, datetime(2026, 3, 9, 12, tzinfo=timezone.utc), NOW - 7 * d):
        for end in (NOW, datetime(2026, 3, 10, 11, tzinfo=timezone.utc), NOW - 3 * h - 6 * m):
            assert counted(start, end) == kinds(start, end), (start, end)


def test_the_series_puts_each_delivery_in_its_bucket_from_the_roll_up_as_from_the_table(endpoint):
    traffic(endpoint)
    from_table = {name: queries.flow_series(window, NOW) for name, window in queries.WINDOWS.items()}
    DELIVERIES.catch_up(NOW)
    for name, window in queries.WINDOWS.items():
        assert queries.flow_series(window, NOW) == from_table[name], name


def test_a_run_counts_each_kind_in_its_hour_and_leaves_the_unsettled_minutes_to_the_table(endpoint):
    deliver(endpoint, "a", NOW - 3 * h)                  # 09:07:30
    deliver(endpoint, "a", NOW - 3 * h + m)              # 09:08:30, redelivery
    deliver(endpoint, "a", NOW - 3 * h + 2 * m, {"x": 1})  # 09:09:30, payload differs
    deliver(endpoint, "b", NOW - 6 * m)                  # 12:01:30, settled
    deliver(endpoint, "c", NOW - 4 * m)                  # 12:03:30, not yet SETTLE old
    DELIVERIES.roll_up(NOW)
    nine, noon = datetime(2026, 3, 10, 9, tzinfo=timezone.utc), datetime(2026, 3, 10, 12, tzinfo=timezone.utc)
    assert rolled() == Counter({(nine, False, True): 1, (nine, True, True): 1, (nine, True, False): 1,
                                (noon, False, True): 1})
    assert DELIVERIES.rolled_until() == SETTLED
    assert counted(NOW - 24 * h, NOW) == kinds(NOW - 24 * h, NOW) == Counter(
        {(False, True): 3, (True, True): 1, (True, False): 1})


def test_a_delivery_committed_after_its_hour_was_rolled_up_is_counted_by_the_next_run(endpoint):
    deliver(endpoint, "early", NOW - 2 * h)
    DELIVERIES.roll_up(NOW)
    # Committed now, with a received_at in an hour already rolled up (within REPAIR): its
    # transaction took its time before the run, and committed after it.
    deliver(endpoint, "straggler", NOW - 2 * h + m)
    deliver(endpoint, "early", NOW - 2 * h + 2 * m)
    DELIVERIES.roll_up(NOW + m)
    ten = datetime(2026, 3, 10, 10, tzinfo=timezone.utc)
    assert rolled()[(ten, False, True)] == 2 and rolled()[(ten, True, True)] == 1
    windows_exact(NOW + m)


def test_running_it_twice_does_not_double_count(endpoint):
    traffic(endpoint)
    DELIVERIES.catch_up(NOW)
    first = rolled()
    DELIVERIES.roll_up(NOW)
    DELIVERIES.catch_up(NOW)
    assert rolled() == first
    assert sum(first.values()) == WebhookDelivery.objects.filter(received_at__lt=SETTLED).count()
    DELIVERIES.catch_up(NOW + 10 * m)  # settled at 12:12: every delivery, each once
    assert sum(rolled().values()) == WebhookDelivery.objects.count()


def test_purging_events_leaves_the_hours_they_were_counted_in(endpoint, settings):
    settings.WEBHOOKS_EVENT_RETENTION_DAYS = 2
    traffic(endpoint)
    WebhookEvent.objects.update(status=WebhookEvent.Status.COMPLETED)
    DELIVERIES.catch_up(NOW)
    before = rolled()
    figures = {name: queries.webhook_stats(window, NOW) for name, window in queries.WINDOWS.items()}
    (events,) = [p for p in core_retention.installed_purgers() if p.name == "webhooks.events"]
    purged = retention.purge(now=NOW, purgers=[events])[0]
    assert purged.deleted == 3  # the events first delivered 3, 7 and 29 days ago
    assert not WebhookDelivery.objects.filter(received_at__lt=NOW - 2 * d).exists()
    assert rolled() == before
    # Later runs recount only the last hours, never the purged ones.
    DELIVERIES.catch_up(NOW + h)
    old = {key: n for key, n in rolled().items() if key[0] < NOW - 2 * d}
    assert len(old) == 7  # the purged events' (hour, kind) counts: 2 + 2 + 3
    assert old == {key: n for key, n in before.items() if key[0] < NOW - 2 * d}
    # A window's partial first hour is read from the table: every window keeps its figures
    # but the 7-day one, whose first hour held the two deliveries of the event 7 days ago.
    # With the default retention (30 days, the widest window) no window's first hour ever
    # holds a purged delivery.
    for name in ("1h", "24h", "30d"):
        assert queries.webhook_stats(queries.WINDOWS[name], NOW) == figures[name], name
    assert queries.webhook_stats(queries.WINDOWS["7d"], NOW)["deliveries"] == figures["7d"]["deliveries"] - 2
    # Without the roll-up, the 30-day window would have lost all seven.
    assert sum(kinds(NOW - 30 * d, NOW).values()) == figures["30d"]["deliveries"] - 7


def test_roll_up_rows_have_their_own_retention(endpoint, settings):
    settings.WEBHOOKS_ROLLUP_RETENTION_DAYS = 31
    deliver(endpoint, "old", NOW - 40 * d)
    deliver(endpoint, "kept", NOW - 29 * d)
    DELIVERIES.catch_up(NOW)
    (purger,) = [p for p in core_retention.installed_purgers() if p.name == "webhooks.delivery_rollups"]
    assert retention.purge(now=NOW, purgers=[purger])[0].deleted == 1
    assert list(DeliveryHourly.objects.values_list("hour", flat=True)) == [rollup.floor_hour(NOW - 29 * d)]


@time_machine.travel(NOW, tick=False)
def test_rebuild_recounts_every_roll_up_from_its_log(endpoint):
    from receipts import store

    with time_machine.travel(NOW - 2 * h, tick=False):
        store.claim("client:t", "k", "email.send", {})
    traffic(endpoint)
    call_command("rollup", stdout=StringIO())
    truth = rolled()
    assert truth and AttemptHourly.objects.exists()
    DeliveryHourly.objects.update(count=99)  # a roll-up gone wrong
    AttemptHourly.objects.update(count=99)
    out = StringIO()
    call_command("rollup", "--rebuild", stdout=out)
    assert rolled() == truth
    assert list(AttemptHourly.objects.values_list("count", flat=True)) == [1]
    assert "webhooks.deliveries:" in out.getvalue() and "receipts.attempts:" in out.getvalue()


@time_machine.travel(NOW, tick=False)
def test_the_scheduled_roll_up_and_rewind_serve_the_deliveries_too(endpoint):
    deliver(endpoint, "a", NOW - 20 * d)
    runs = tasks.roll_up()
    assert {r["name"] for r in runs} == {
        "receipts.attempts", "receipts.claim_durations", "receipts.observed", "webhooks.deliveries", "webhooks.processing_durations",
        "outbox.messages", "outbox.attempts", "outbox.send_durations",
    }
    assert DeliveryHourly.objects.get().count == 1
    # A bulk load of past rows (the seeder) rewinds every roll-up, and the next run
    # recounts the hours handed back.
    deliver(endpoint, "b", NOW - 20 * d + m)
    rollup.rewind(NOW - 30 * d)
    assert DELIVERIES.rolled_until() == rollup.floor_hour(NOW - 30 * d)
    rollup.catch_up()
    assert DeliveryHourly.objects.get().count == 2
