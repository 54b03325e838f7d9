"""Health at a glance in a real browser: the demo's healthy traffic (the simulator's own,
through the real HTTP endpoints, drained by the outbox's own drain as the worker would)
shows "All clear"; a partner that refuses every post sends messages dead, and the overview's
polling turns the first line red with a link to the dead messages, without a reload.

Screenshots go to var/screenshots/health-*.png."""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from idemdash.core import rollup
from idemdash.core.clients import create_token
from idemdash.devtools import simulator
from idemdash.dashboard import health
from receipts.outbox import drain, store as outbox_store
from receipts.outbox.models import OutboxMessage
from tests.dashboard.test_browser import (  # noqa: F401
    SHOTS,
    browser,
    charts_drawn,
    next_poll,
    operator,
    operator_page,
    read_in_place,
)
from tests.receipts.outbox.receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def forbidden(key: str, nth: int, body: object) -> tuple[int, dict[str, str], float]:
    return 403, {}, 0.0


@pytest.fixture
def healthy_demo_traffic(live_server, settings, outbox_may_post_locally):
    """`manage.py simulate --healthy`'s traffic against the live server while a drain sends
    the outbox as the worker does: agents (runs, replays, 409s, 422s, crashes taken over,
    failures retried) and outbox posts to the simulator's flaky receiver. Its leases and retries
    are a second or less (the command's are 15 and 20 s), so the run takes seconds, not a minute."""
    settings.STRIPE_WEBHOOK_SECRET = settings.SHOPIFY_WEBHOOK_SECRET = ""
    settings.OUTBOX_BACKOFF_BASE_SECONDS = 1
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # the crashed agents' 1 s leases
    stop = threading.Event()

    def worker() -> None:
        try:
            while not stop.is_set():
                drain.drain(max_seconds=1, drainer="test-worker")
                stop.wait(0.2)
        finally:
            connections.close_all()

    thread = threading.Thread(target=worker)
    thread.start()
    lines: list[str] = []
    config = simulator.Config(
        base_url=live_server.url, token=create_token("simulator")[1], rate=30, actions=90, seed=22,
        receiver_port=0, receiver_failures=0.3, receiver_slow=0, staged_faults=False,
        crash_lease_seconds=1, failure_retry_seconds=0.5, wait_for_server=10,
    )
    try:
        simulator.Simulator(config, write=lines.append).run()
    finally:
        stop.set()
        thread.join(30)
    return "\n".join(lines)


def test_healthy_traffic_shows_all_clear_and_a_fault_turns_the_first_line_red_with_a_link(
    healthy_demo_traffic, operator_page, live_server
):
    page = operator_page
    # The traffic had every healthy retry path in it (the simulator's summary says so).
    summary = healthy_demo_traffic.rsplit("stopped. [", 1)[1]
    for shown in ("x 409", "x 422", "taken over", "failed"):
        assert shown in summary, summary
    assert "0 hung waiting for a release" in summary  # no staged hung agents

    page.goto(live_server.url + "/")
    line = page.locator(".health-line")
    assert line.get_attribute("data-health") == "ok", line.inner_text()
    assert "All clear." in line.inner_text()
    assert page.locator('.tile[data-health="bad"], .tile[data-health="warn"]').count() == 0
    assert page.locator('.tile[data-health="ok"]').count() == len(health.TILE_CHECKS)  # every coloured tile
    conflict = page.inner_text('[data-figure="receipts.mismatch_conflicts"]')
    assert int(page.inner_text('[data-figure="receipts.mismatch_conflicts"] .tile-value')) > 0  # 422s, yet OK
    assert "OK since" in conflict and "warn ≥ 10%" in conflict
    page.screenshot(path=SHOTS / "health-all-clear.png", full_page=True)

    # History: the claims' and sends' durations and the backlog age (sampled by the roll-up
    # run, which the schedule makes every minute) are charted.
    read_in_place(rollup.catch_up)
    page.goto(live_server.url + "/?window=24h")
    charts_drawn(page, 8)
    for chart in ("chart-latency", "chart-backlog"):
        figure = page.locator(f"figure:has(#{chart})")
        assert figure.get_attribute("data-empty") is None, chart
        assert page.locator(f"#{chart} .main-svg").count() >= 1
    assert page.locator("#chart-latency .scatterlayer .trace").count() >= 6
    # The simulator's claims are charted beside the sends, from the claim-duration roll-up.
    legend = page.locator("#chart-latency .legend").text_content()  # SVG: no inner_text
    assert "claim p50" in legend and "claim p99" in legend
    drawn = page.evaluate("""() => Object.fromEntries(document.getElementById('chart-latency').data
        .filter(t => t.name).map(t => [t.name, (t.y || []).filter(v => v !== null).length]))""")
    assert drawn["claim p50"] > 0 and drawn["claim p99"] > 0 and drawn["send p50"] > 0, drawn
    page.locator("figure:has(#chart-latency)").screenshot(path=SHOTS / "health-latency-chart.png")
    page.locator("figure:has(#chart-backlog)").screenshot(path=SHOTS / "health-backlog-chart.png")
    page.clock.install()
    page.goto(live_server.url + "/?window=1h")

    # The partner starts refusing every post with a permanent 403: the next drain sends
    # the messages dead (the demo's staged partner outage).
    def partner_outage() -> int:
        with running_receiver(forbidden) as receiver:
            for i in range(8):
                outbox_store.enqueue("http.post", {"url": receiver.url + "/partner/invoices", "json": {"n": i}},
                                     f"invoice-copy-{i}")
            drain.drain(drainer="test-worker")
        return OutboxMessage.objects.filter(status="dead").count()

    assert read_in_place(partner_outage) == 8
    # No reload: the overview's 15 s poll brings the red line in.
    page.evaluate("window.__stayed = true")
    next_poll(page)
    page.wait_for_selector('.health-line[data-health="bad"]')
    assert page.evaluate("window.__stayed") is True
    problem = page.locator('.health-line li[data-health="bad"] a', has_text="Dead outbox messages")
    assert problem.get_attribute("href") == "/outbox/?status=dead"
    assert "bad ≥ 5%" in problem.inner_text()
    dead_tile = page.locator('[data-figure="outbox.dead"]')
    assert dead_tile.get_attribute("data-health") == "bad"
    assert "Bad since" in dead_tile.inner_text()
    page.screenshot(path=SHOTS / "health-fault.png", full_page=True)
    page.locator(".health-line").screenshot(path=SHOTS / "health-fault-line.png")

    # The link opens the filtered list: the dead messages.
    problem.click()
    page.wait_for_url("**/outbox/?status=dead")
    assert page.locator("#outbox-table td.key", has_text="invoice-copy-").count() == 8
    page.screenshot(path=SHOTS / "health-fault-list.png", full_page=True)

    states = read_in_place(lambda: {s.name: s.state for s in health.HealthState.objects.all()})
    assert states["outbox.dead"] == "bad" and states["receipts.mismatch_conflicts"] == "ok"
