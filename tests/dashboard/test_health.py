"""Health checks: thresholds on rates and ages, not on counts; since when a state holds;
the overview's first line; the settings refused by `manage.py check`."""

from __future__ import annotations

import threading
from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections
from django.utils import timezone

from idemdash.dashboard import alerts, health
from idemdash.dashboard.models import Alert, AlertRule, HealthState
from receipts import observe
from tests.dashboard.build import completed, mismatched, outbox_message, stuck

pytestmark = pytest.mark.django_db


def reading(readings: list[health.Reading], name: str) -> health.Reading:
    return next(r for r in readings if r.name == name)


def healthy_traffic(n: int) -> None:
    for i in range(n):
        completed(f"order-{i}")


def test_an_empty_log_is_all_clear():
    readings = health.observe()
    assert {r.state for r in readings} == {health.OK}
    assert health.summary(readings, []).state == health.OK


def test_a_few_422s_in_much_traffic_stay_ok_and_the_same_count_in_little_traffic_is_bad():
    healthy_traffic(60)
    for i in range(3):
        mismatched(f"reuse-{i}", {"amount": 1}, {"amount": 2})
    # 3 of 66 requests (4.5%) are 422s: under the 10% warn threshold, though the count is 3.
    r = reading(health.observe(), "receipts.mismatch_conflicts")
    assert (r.state, r.part, r.sample, r.value_display) == (health.OK, 3, 66, "4.55%")

    from receipts.models import Attempt, Receipt

    Attempt.objects.filter(key__startswith="order-").delete()
    Receipt.objects.filter(key__startswith="order-").delete()
    # The same three 422s in 6 requests: judged as 3 of 20 (the minimum sample), 15%: warn.
    r = reading(health.observe(), "receipts.mismatch_conflicts")
    assert (r.state, r.sample, r.value) == (health.WARN, 6, 0.15)
    assert r.summary == "422 mismatches: 3 of 6 (of claim requests reused a key with another request; warn ≥ 10%)"


def test_one_failure_in_two_requests_does_not_read_as_half_but_five_dead_of_five_is_bad():
    mismatched("reuse-1", {"amount": 1}, {"amount": 2})  # 1 of 2 requests: 1 of 20, 5%
    r = reading(health.observe(), "receipts.mismatch_conflicts")
    assert (r.state, r.value, r.value_display) == (health.OK, 0.05, "1 of 2")
    for i in range(5):
        outbox_message(f"dead-{i}", "dead")
    r = reading(health.observe(), "outbox.dead")
    assert (r.state, r.value, r.value_display) == (health.BAD, 0.25, "5 of 5")


@pytest.mark.parametrize("minutes_ago,state", [(0, health.OK), (2, health.WARN), (5, health.BAD)])
def test_a_stuck_receipt_is_judged_by_how_long_it_has_been_past_its_lease(minutes_ago, state):
    # The builder claims with the default 30 s lease: past it by minutes_ago minus 30 s.
    if minutes_ago:
        stuck("order-stuck", minutes_ago=minutes_ago)
    r = reading(health.observe(), "receipts.stuck")
    assert r.state == state
    if minutes_ago:
        assert r.value == pytest.approx(minutes_ago * 60 - 30, abs=2)


def test_the_backlog_is_judged_by_the_age_of_its_oldest_message():
    outbox_message("fresh", minutes_ago=1)
    assert reading(health.observe(), "outbox.backlog_age").state == health.OK
    outbox_message("old", minutes_ago=11)
    r = reading(health.observe(), "outbox.backlog_age")
    assert r.state == health.BAD and r.value == pytest.approx(660, abs=2)


def test_since_is_when_the_state_began_and_an_unchanged_state_keeps_it():
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        assert reading(health.observe(), "receipts.stuck").since == start
    stuck("order-stuck", minutes_ago=6)
    later = start + timedelta(seconds=30)
    with time_machine.travel(later, tick=False):
        r = reading(health.observe(), "receipts.stuck")
        assert (r.state, r.since) == (health.BAD, later)
    with time_machine.travel(later + timedelta(minutes=1), tick=False):
        assert reading(health.observe(), "receipts.stuck").since == later  # still bad, since then
    assert HealthState.objects.get(name="receipts.stuck").state == health.BAD


def test_an_older_observation_never_overwrites_a_newer_transition():
    now = timezone.now()
    health.observe(now)
    stuck("order-stuck", minutes_ago=6)
    health.observe(now + timedelta(seconds=10))  # bad, recorded
    # An observer that measured before (with the receipt not yet stuck, say) comes late.
    stale = health.measure(now)
    r = reading(stale, "receipts.stuck")
    r.state = health.OK
    health.record(stale, now + timedelta(seconds=5))
    assert HealthState.objects.get(name="receipts.stuck").state == health.BAD


@pytest.mark.django_db(transaction=True)
def test_two_observers_at_once_record_one_transition():
    health.observe()
    stuck("order-stuck", minutes_ago=6)
    barrier = threading.Barrier(2)
    seen: list[object] = []

    def observe() -> None:
        try:
            readings = health.measure()
            barrier.wait(10)
            health.record(readings, readings_moment)
            seen.append(reading(readings, "receipts.stuck").since)
        finally:
            connections.close_all()

    readings_moment = timezone.now()
    threads = [threading.Thread(target=observe) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    row = HealthState.objects.get(name="receipts.stuck")
    assert row.state == health.BAD and seen == [row.since, row.since]


def test_the_first_line_names_each_problem_and_each_firing_alert_with_its_link():
    stuck("order-stuck", minutes_ago=6)
    rule = AlertRule.objects.create(name="Stuck", metric="stuck_rows", threshold=0, channel="email",
                                    target="ops@example.com", window_minutes=15)
    alerts.evaluate()
    panel = alerts.overview_alerts(__import__("idemdash.dashboard.queries", fromlist=["x"]).WINDOWS["1h"])
    s = health.summary(health.observe(), panel["firing"])
    assert s.state == health.BAD
    assert [p["url"] for p in s.problems] == ["/stuck/", "/stuck/"]
    assert s.problems[0]["text"].startswith("Stuck receipts: 5 min (the oldest receipt past its lease; bad ≥ 180 s)")
    assert s.problems[1]["text"] == f"Alert “Stuck”: {rule.condition}".replace(":", " firing:", 1)
    assert Alert.objects.get().state == "firing"


def test_the_first_line_names_the_failure_group_failing_now_until_someone_acknowledges_it(viewer_client, operator):
    from idemdash.core import failures
    from tests.dashboard.build import webhook_event

    for n in range(3):
        webhook_event(f"evt_refund_{n}", "dead", slug="shop", provider="shopify", event_type="refunds/create")
    html = viewer_client.get("/").content.decode()
    line = html.split('class="health-line')[1].split("</div>")[0]
    assert 'href="/failures/"' in line and "shop refunds/create: 3 dead, RuntimeError: ledger down" in line
    failures.set_state(failures.FailureGroup.objects.get(), "acknowledged", actor="otto", user=operator)
    assert "refunds/create" not in viewer_client.get("/").content.decode().split('class="health-line')[1].split("</div>")[0]


def test_failures_that_are_still_being_retried_do_not_make_the_first_line_a_problem(viewer_client):
    from tests.dashboard.build import webhook_event

    webhook_event("evt_flaky", "retry", event_type="invoice.paid")  # failed once, its retry is due
    assert "invoice.paid" not in viewer_client.get("/").content.decode().split('class="health-line')[1].split("</div>")[0]


def test_the_overview_says_all_clear_on_healthy_traffic(viewer_client):
    healthy_traffic(25)
    html = viewer_client.get("/").content.decode()
    assert 'data-health="ok"' in html and "All clear." in html
    assert 'class="tile tile-ok" data-figure="receipts.mismatch_conflicts"' in html
    assert "OK since" in html and "0% in 15 min · warn ≥ 10%" in html


def test_a_fault_turns_the_first_line_red_with_a_link_and_the_tile_says_since_when(viewer_client):
    healthy_traffic(25)
    viewer_client.get("/")  # all clear, recorded
    for i in range(5):
        outbox_message(f"dead-{i}", "dead")
    html = viewer_client.get("/").content.decode()
    assert '<div class="health-line alert alert-error" role="status" data-health="bad">' in html
    assert '<a href="/outbox/?status=dead">Dead outbox messages: 5 of 5 (of messages that finished went dead; bad ≥ 5%)</a>' in html
    assert 'class="tile tile-bad" data-figure="outbox.dead"' in html
    assert "Bad since" in html
    assert "All clear" not in html


@pytest.mark.urls("tests.dashboard.coverage_urls")
def test_a_refund_retried_where_nothing_protects_it_turns_the_first_line_red_with_a_link_to_coverage(viewer_client):
    for n in range(18):  # one refund each, then one of them sent again twice
        viewer_client.post(f"/shop/orders/{n}/refund/", "{}", content_type="application/json")
    for _ in range(2):
        viewer_client.post("/shop/orders/0/refund/", "{}", content_type="application/json")
    observe.flush()
    r = reading(health.observe(), "unprotected.duplicates")
    assert (r.state, r.part, r.sample) == (health.BAD, 2, 20)
    html = viewer_client.get("/").content.decode()
    assert ('<a href="/coverage/">Duplicates on unprotected routes: 10% (of write requests to routes nothing '
            "protects repeated one within the observer&#x27;s window; bad ≥ 5%)</a>") in html


def test_the_banner_links_each_firing_alert_to_its_cause(viewer_client):
    stuck("order-stuck")
    AlertRule.objects.create(name="Stuck", metric="stuck_rows", threshold=0, channel="email", target="ops@example.com")
    alerts.evaluate()
    html = viewer_client.get("/").content.decode()
    assert '<a href="/stuck/" data-link="cause">see the cause</a>' in html


@pytest.mark.parametrize("name,value,message", [
    ("IDEMDASH_HEALTH_THRESHOLDS", {"receipts.nope": (1, 2)}, "unknown check 'receipts.nope'"),
    ("IDEMDASH_HEALTH_THRESHOLDS", {"outbox.dead": (10, 5)}, "must be (warn, bad) in percent, 0 < warn <= bad <= 100"),
    ("IDEMDASH_HEALTH_THRESHOLDS", {"outbox.dead": (10, 500)}, "0 < warn <= bad <= 100"),
    ("IDEMDASH_HEALTH_THRESHOLDS", {"outbox.stuck": ("1", 2)}, "in seconds"),
    ("IDEMDASH_HEALTH_THRESHOLDS", [("outbox.dead", 1, 2)], "must be a dict"),
    ("IDEMDASH_HEALTH_WINDOW_MINUTES", 0, "IDEMDASH_HEALTH_WINDOW_MINUTES must be a whole number"),
    ("IDEMDASH_HEALTH_MIN_SAMPLE", 2.5, "IDEMDASH_HEALTH_MIN_SAMPLE must be a whole number"),
])
def test_manage_py_check_refuses_bad_health_settings(settings, name, value, message):
    setattr(settings, name, value)
    with pytest.raises(SystemCheckError) as exc:
        call_command("check", stdout=StringIO(), stderr=StringIO())
    assert message in str(exc.value) and "idemdash.E001" in str(exc.value)


def test_thresholds_from_settings_replace_the_defaults(settings):
    settings.IDEMDASH_HEALTH_THRESHOLDS = {"receipts.stuck": (600, 1200)}
    stuck("order-stuck", minutes_ago=6)
    assert reading(health.observe(), "receipts.stuck").state == health.OK
    call_command("check", stdout=StringIO())


def test_the_docs_table_gives_every_check_its_default_thresholds():
    from pathlib import Path

    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "dashboard.md").read_text()
    section = text.split("## Health at a glance", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_.]+)` \|[^|]*\|[^|]*\| ([\d.]+) ?(?:%| s) \| ([\d.]+) ?(?:%| s) \|", section, re.M)
    assert {name: (float(warn), float(bad)) for name, warn, bad in rows} == {
        name: (float(warn), float(bad)) for name, (warn, bad) in health.DEFAULT_THRESHOLDS.items()
    }
