"""The overview's charts in a real browser (Debian's Chromium driven by Playwright): a
hover over a bar shows that bucket's time range and count, the window the user picked
survives a reload, and an empty chart says why it is empty.

Screenshots go to var/screenshots/overview-charts*.png."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from receipts import store
from tests.dashboard.build import SCOPE, completed, mismatched
from tests.dashboard.test_browser import SHOTS, browser, charts_drawn, operator, operator_page  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A bucket's range, as charts.range_text writes it: "05:50–05:55 UTC", or with the days when it
# ends on another day than it starts ("Nov 28 23:55 – Nov 29 00:00 UTC", a run near midnight).
SPAN = r"(\d{2}:\d{2}–\d{2}:\d{2}|[A-Z][a-z]{2} \d{2} \d{2}:\d{2} – [A-Z][a-z]{2} \d{2} \d{2}:\d{2}) UTC"
RANGE = re.compile(SPAN + " · in progress")


def test_a_bar_shows_its_bucket_on_hover_the_window_is_kept_and_empty_charts_say_why(operator_page, live_server):
    now = timezone.now()
    for minutes_ago, n in ((25, 3), (15, 6), (0, 5)):
        with time_machine.travel(now - timedelta(minutes=minutes_ago), tick=False):
            for i in range(n):
                completed(f"order-{minutes_ago}-{i}")
            key = f"order-{minutes_ago}-0"
            store.claim(SCOPE, key, "payment.create", {"key": key})  # a replay
    mismatched("order-422", {"amount": 500}, {"amount": 900})
    page = operator_page
    page.set_viewport_size({"width": 1440, "height": 900})

    # A fresh session opens on the last hour, in 5-minute bars.
    page.goto(live_server.url + "/")
    charts_drawn(page, 6)
    assert page.locator('.segmented a[aria-current="true"]').inner_text() == "1h"
    assert "per 5 min" in page.inner_text("#chart-traffic")
    page.screenshot(path=SHOTS / "overview-charts.png")

    # Hover the bucket of the 422: the tooltip names its range, "in progress", and the count.
    chart = page.locator("#chart-conflicts")
    chart.scroll_into_view_if_needed()
    bar = chart.locator(".barlayer .point path").last
    box = bar.bounding_box()
    assert box is not None and box["height"] > 10, "the 422 is drawn as a bar"
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    tooltip = chart.locator(".hoverlayer .legend")
    tooltip.wait_for(state="visible", timeout=5_000)
    text = tooltip.text_content()
    assert RANGE.search(text), text
    assert "422 mismatch: 1" in text and "409 in progress: 0" in text
    page.screenshot(path=SHOTS / "overview-charts-hover.png")

    # Over the empty space above a short bar, too: the whole bucket answers. ('closest',
    # the former hover mode, answered only on the bar itself or a line's point.)
    traffic = page.locator("#chart-traffic")
    traffic.scroll_into_view_if_needed()
    short = [b for b in (p.bounding_box() for p in traffic.locator(".barlayer .trace").first.locator(".point path").all())
             if b and b["height"] > 1][0]
    plot_top = traffic.locator(".nsewdrag").first.bounding_box()["y"]
    assert short["y"] - plot_top > 40, "there is room above the first bar"
    page.mouse.move(short["x"] + short["width"] / 2, plot_top + 10)
    box = traffic.locator(".hoverlayer .legend")
    box.wait_for(state="visible", timeout=5_000)
    assert re.search(SPAN + " · 4 requests", box.text_content()), box.text_content()
    assert "ran: 3" in box.text_content() and "duplicates (not run): 1" in box.text_content()
    page.locator(".charts").scroll_into_view_if_needed()
    page.mouse.move(5, 5)
    page.screenshot(path=SHOTS / "overview-charts-1440.png")

    # Charts with nothing to show say why, on the chart.
    webhooks = page.locator("#chart-webhooks")
    assert "No webhook deliveries in the last 1h" in webhooks.inner_text()

    # Pick 24h, reload the bare URL: the session kept 24h.
    page.click('.segmented a:text("24h")')
    page.wait_for_url("**/?window=24h")
    page.goto(live_server.url + "/")
    charts_drawn(page, 6)
    assert page.locator('.segmented a[aria-current="true"]').inner_text() == "24h"
    assert "per hour" in page.inner_text("#chart-traffic")
    assert "No webhook deliveries in the last 24h" in page.inner_text("#chart-webhooks")
