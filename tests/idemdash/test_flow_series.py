"""queries.flow_series and the webhook, outbox and stuck charts drawn from it."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import time_machine

from idemdash.dashboard import charts, queries
from receipts.outbox.models import OutboxMessage
from tests.dashboard.flow_traffic import EXPECTED_FLOW, FAILING_TYPE, known_flow_traffic, outbox_receiver_policy
from tests.receipts.outbox.receiver import running_receiver
from webhooks import handlers
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 2, 30, tzinfo=timezone.utc)


@pytest.fixture
def traffic(settings, outbox_may_post_locally):
    settings.WEBHOOKS_MAX_ATTEMPTS = 1
    settings.OUTBOX_BACKOFF_BASE_SECONDS = settings.OUTBOX_BACKOFF_CAP_SECONDS = 10**7
    settings.STRIPE_WEBHOOK_SECRET = ""
    try:
        with running_receiver(outbox_receiver_policy) as receiver:
            known_flow_traffic(NOW, receiver.url)
    finally:
        handlers.unregister("stripe", FAILING_TYPE)


@pytest.mark.parametrize("name", ["1h", "24h", "7d", "30d"])
def test_the_flow_series_adds_up_to_the_stats_in_every_window(traffic, name):
    window = queries.WINDOWS[name]
    series = queries.flow_series(window, NOW)
    expected = EXPECTED_FLOW[name]
    assert sum(r["deliveries"] for r in series) == expected["webhooks"]["deliveries"]
    assert sum(r["events"] for r in series) == expected["webhooks"]["events"]
    assert sum(r["enqueued"] for r in series) == expected["outbox"]["enqueued"]
    assert sum(r["sent"] for r in series) == expected["outbox"]["sent"]


def test_the_1h_buckets_put_each_delivery_and_message_in_its_five_minutes(traffic):
    series = {r["start"].strftime("%H:%M"): r for r in queries.flow_series(queries.WINDOWS["1h"], NOW)}
    # evt_a first came 50 minutes before 12:02:30 (11:12:30), its redeliveries at 11:22:30, 11:32:30.
    assert (series["11:10"]["deliveries"], series["11:10"]["events"]) == (1, 1)
    assert (series["11:20"]["deliveries"], series["11:20"]["events"]) == (1, 0)
    # m2 died at 11:23:30 (39 minutes before); m1 was sent at 11:13:30.
    assert series["11:20"]["died"] == 1 and series["11:10"]["sent"] == 1


def test_operator_releases_of_stuck_rows_are_charted_from_the_audit_log(traffic):
    from webhooks import processing

    with time_machine.travel(NOW, tick=False):
        processing.release(WebhookEvent.objects.get(provider_event_id="evt_g"), actor="otto")
    series = queries.flow_series(queries.WINDOWS["1h"], NOW)
    assert series[-1]["events_released"] == 1 and sum(r["messages_released"] for r in series) == 0


def test_operator_releases_of_stuck_outbox_messages_are_charted_from_the_audit_log(traffic):
    from idemdash.core import audit

    message = OutboxMessage.objects.first()
    with time_machine.travel(NOW, tick=False):
        audit.record("otto", "outbox_message.release", message, "in_flight", "retry")
    series = queries.flow_series(queries.WINDOWS["1h"], NOW)
    assert series[-1]["messages_released"] == 1 and sum(r["events_released"] for r in series) == 0


def test_the_charts_name_what_they_count_and_are_plain_json(traffic):
    window = queries.WINDOWS["24h"]
    flow = queries.flow_series(window, NOW)
    receipts = queries.receipt_series(window, NOW)
    webhooks = charts.webhook_chart(flow, "24h")
    assert [t["name"] for t in webhooks["data"]] == ["bucket", "unique events", "redeliveries"]
    assert sum(webhooks["data"][1]["y"]) == 4 and sum(webhooks["data"][2]["y"]) == 3  # 7 deliveries
    outbox = charts.outbox_chart(flow, "24h")
    assert [t["name"] for t in outbox["data"]] == ["bucket", "enqueued", "sent", "died"]
    assert [sum(t["y"]) for t in outbox["data"][1:]] == [6, 2, 1]
    stuck = charts.stuck_chart(receipts, flow, "24h")
    assert [t["name"] for t in stuck["data"]] == [
        "bucket", "receipt takeovers", "receipts released", "outbox lease lost", "events / messages released"]
    for figure in (webhooks, outbox, stuck):
        assert json.loads(json.dumps(figure)) == figure


def test_the_first_bucket_counts_from_the_windows_start_and_only_the_last_is_in_progress(traffic):
    series = queries.flow_series(queries.WINDOWS["1h"], NOW)
    # 12:02:30 - 1h = 11:02:30: the first bucket, 11:00-11:05, counts from then (so the
    # buckets add up to the tiles); the last, 12:00-12:05, is still filling.
    assert series[0]["start"] == datetime(2026, 3, 10, 11, 0, tzinfo=timezone.utc)
    assert series[0]["cut"] == datetime(2026, 3, 10, 11, 2, 30, tzinfo=timezone.utc)
    assert all(r["cut"] is None for r in series[1:])
    assert [r["partial"] for r in series] == [False] * 12 + [True]
    assert all(r["end"] - r["start"] == queries.WINDOWS["1h"].bucket for r in series)
