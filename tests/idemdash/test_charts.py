from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from idemdash.dashboard import charts

T0 = datetime(2026, 3, 10, 9, 0, tzinfo=timezone.utc)
BUCKET = timedelta(minutes=5)


def row(i: int, partial: bool = False, **counts: int) -> dict:
    base = {"claimed": 0, "replayed": 0, "in_progress": 0, "mismatch": 0, "retried_after_failure": 0,
            "lease_takeover": 0, "waited": 0, "released": 0, **counts}
    base["requests"] = sum(base[k] for k in ("claimed", "replayed", "in_progress", "mismatch",
                                             "retried_after_failure", "lease_takeover", "waited"))
    base["concurrent"] = base["in_progress"] + base["waited"]
    base["duplicates"] = base["replayed"] + base["concurrent"] + base["mismatch"]
    start = T0 + i * BUCKET
    return {"start": start, "end": start + BUCKET, "partial": partial, **base}


def flow(i: int, partial: bool = False, **counts: int) -> dict:
    start = T0 + i * BUCKET
    names = ("deliveries", "events", "enqueued", "sent", "died", "stale", "events_released", "messages_released")
    return {"start": start, "end": start + BUCKET, "partial": partial, **{n: counts.get(n, 0) for n in names}}


def noted(i: int, partial: bool = False, requests: int = 0, duplicates: int = 0) -> dict:
    start = T0 + i * BUCKET
    return {"start": start, "end": start + BUCKET, "partial": partial, "requests": requests, "duplicates": duplicates}


SERIES = [row(0, claimed=3, replayed=1), row(1), row(2, claimed=1, in_progress=2, mismatch=1, lease_takeover=1, released=2),
          row(3, partial=True, claimed=1, replayed=1)]
FLOW = [flow(0, deliveries=3, events=2, enqueued=4, sent=3), flow(1), flow(2, died=1, stale=1, events_released=1),
        flow(3, partial=True, deliveries=1, events=1)]
UNPROTECTED = [noted(0, requests=4, duplicates=1), noted(1), noted(2, requests=2, duplicates=2), noted(3, partial=True, requests=1)]


def traces(fig: dict) -> dict[str, dict]:
    return {t["name"]: t for t in fig["data"]}


def test_counts_are_bars_with_the_bucket_width_in_the_title_and_the_axis():
    for fig in (charts.traffic_chart(SERIES, "1h"), charts.conflicts_chart(SERIES, "1h"),
                charts.stuck_chart(SERIES, FLOW, "1h"), charts.webhook_chart(FLOW, "1h"), charts.outbox_chart(FLOW, "1h"),
                charts.unprotected_chart(UNPROTECTED, "1h")):
        kinds = {t["type"] for t in fig["data"] if t["name"] != "bucket"}
        assert kinds == {"bar"}, fig["layout"]["title"]["text"]
        assert "per 5 min" in fig["layout"]["title"]["subtitle"]["text"]
        assert fig["layout"]["yaxis"]["title"]["text"].endswith("per 5 min")


def test_the_bucket_width_is_said_as_people_say_it():
    def rows(width: timedelta) -> list[dict]:
        return [{"start": T0, "end": T0 + width}]
    assert [charts.bucket_text(rows(w)) for w in (BUCKET, timedelta(hours=1), timedelta(hours=6), timedelta(days=1))] == [
        "5 min", "hour", "6 h", "day"]


def test_each_bar_sits_in_the_middle_of_its_bucket():
    bars = traces(charts.conflicts_chart(SERIES, "1h"))["422 mismatch"]
    assert bars["x"][0] == (T0 + BUCKET / 2).isoformat()
    assert bars["y"] == [0, 0, 1, 0]


def test_traffic_stacks_what_ran_on_the_duplicates_that_did_not():
    fig = charts.traffic_chart(SERIES, "1h")
    assert traces(fig)["ran"]["y"] == [3, 0, 2, 1] and traces(fig)["duplicates (not run)"]["y"] == [1, 0, 3, 1]
    assert fig["layout"]["barmode"] == "stack"


def test_webhooks_stack_new_events_on_redeliveries():
    fig = charts.webhook_chart(FLOW, "1h")
    assert traces(fig)["unique events"]["y"] == [2, 0, 0, 1] and traces(fig)["redeliveries"]["y"] == [1, 0, 0, 0]


def test_unprotected_requests_stack_the_would_be_duplicates_on_those_that_repeated_none():
    fig = charts.unprotected_chart(UNPROTECTED, "1h")
    assert traces(fig)["not a repeat"]["y"] == [3, 0, 0, 1]
    assert traces(fig)["would-be duplicates (ran again)"]["y"] == [1, 0, 2, 0]
    assert fig["layout"]["barmode"] == "stack" and fig["layout"]["title"]["text"] == "Unprotected write requests"
    assert traces(fig)["bucket"]["customdata"][0] == "09:00–09:05 UTC · 4 requests"


def test_fresh_key_retries_stack_those_that_ran_again_and_those_refused():
    series = [{**noted(0), "ran_again": 2, "refused": 1}, {**noted(1, partial=True), "ran_again": 0, "refused": 0}]
    fig = charts.fresh_key_chart(series, "1h")
    assert traces(fig)["ran again (new key)"]["y"] == [2, 0] and traces(fig)["refused (409 fresh-key-retry)"]["y"] == [1, 0]
    assert fig["layout"]["barmode"] == "stack" and fig["layout"]["title"]["text"] == "Fresh-key retries"
    quiet = charts.fresh_key_chart([{**noted(0), "ran_again": 0, "refused": 0}], "24h")
    assert quiet["empty"] == "No request repeated under a new key in the last 24h"


def test_the_bucket_in_progress_is_hatched_and_lighter_and_says_so_on_hover():
    fig = charts.traffic_chart(SERIES, "1h")
    marker = traces(fig)["ran"]["marker"]
    assert marker["pattern"]["shape"] == ["", "", "", "/"]
    assert marker["opacity"] == [1, 1, 1, charts.PARTIAL_OPACITY]
    hover = traces(fig)["bucket"]["customdata"]
    assert hover[0] == "09:00–09:05 UTC · 4 requests"
    assert hover[3] == "09:15–09:20 UTC · in progress · 2 requests"


def test_every_chart_hovers_the_whole_bucket_with_its_range_first():
    for fig in (charts.traffic_chart(SERIES, "1h"), charts.duplicate_rate_chart(SERIES, "1h"),
                charts.stuck_chart(SERIES, None, "1h"), charts.outbox_chart(FLOW, "1h")):
        assert fig["layout"]["hovermode"] == "x unified"
        assert fig["data"][0]["name"] == "bucket" and fig["layout"]["legend"]["traceorder"] == "normal"
        assert "%{customdata}" in fig["data"][0]["hovertemplate"]
        assert all("%{y" in t["hovertemplate"] for t in fig["data"][1:])


def test_a_first_bucket_cut_by_the_windows_start_is_marked_and_says_from_when():
    cut = dict(row(0, claimed=2), cut=T0 + timedelta(minutes=2, seconds=30))
    fig = charts.traffic_chart([cut, row(1, claimed=1)], "1h")
    assert traces(fig)["ran"]["marker"]["pattern"]["shape"] == ["/", ""]
    assert traces(fig)["bucket"]["customdata"][0] == "09:00–09:05 UTC · counted from 09:02:30 (the window's start) · 2 requests"


def test_a_bucket_across_midnight_names_both_days():
    start = datetime(2026, 3, 10, tzinfo=timezone.utc)
    assert charts.range_text({"start": start, "end": start + timedelta(days=1)}) == "Mar 10 00:00 – Mar 11 00:00 UTC"


def test_the_duplicate_rate_is_a_percent_line_that_leaves_out_the_bucket_in_progress():
    fig = charts.duplicate_rate_chart(SERIES, "1h")
    line, so_far = traces(fig)["duplicate rate"], traces(fig)["so far (bucket in progress)"]
    assert line["type"] == "scatter" and "lines" in line["mode"]
    assert line["y"] == [25.0, None, 60.0, None]
    assert so_far["y"] == [None, None, None, 50.0] and so_far["mode"] == "markers"
    assert fig["layout"]["yaxis"]["ticksuffix"] == "%" and "%" in fig["layout"]["title"]["subtitle"]["text"]
    assert traces(fig)["bucket"]["customdata"][2] == "09:10–09:15 UTC · 3 of 5 requests"


def test_an_empty_chart_says_why_on_the_chart():
    quiet = [row(0), row(1, partial=True)]
    quiet_flow = [flow(0), flow(1, partial=True)]
    cases = {
        "No claim requests in the last 24h": charts.traffic_chart(quiet, "24h"),
        "No claim requests in the last 24h ": charts.duplicate_rate_chart(quiet, "24h"),
        "No concurrent duplicates or 422 answers in the last 24h": charts.conflicts_chart(quiet, "24h"),
        "No stuck lease recovered in the last 24h": charts.stuck_chart(quiet, quiet_flow, "24h"),
        "No webhook deliveries in the last 24h": charts.webhook_chart(quiet_flow, "24h"),
        "No outbox messages enqueued or sent in the last 24h": charts.outbox_chart(quiet_flow, "24h"),
        "No write requests to unprotected routes in the last 24h": charts.unprotected_chart([noted(0), noted(1, True)], "24h"),
    }
    for reason, fig in cases.items():
        assert fig["empty"] == reason.strip()
        assert fig["layout"]["annotations"][0]["text"] == reason.strip()


def test_a_chart_with_data_has_no_empty_note():
    for fig in (charts.traffic_chart(SERIES, "1h"), charts.webhook_chart(FLOW, "1h"), charts.stuck_chart(SERIES, FLOW, "1h")):
        assert fig["empty"] is None and "annotations" not in fig["layout"]


def test_every_figure_is_plain_json():
    for fig in (charts.traffic_chart(SERIES, "1h"), charts.duplicate_rate_chart(SERIES, "1h"),
                charts.conflicts_chart(SERIES, "1h"), charts.stuck_chart(SERIES, FLOW, "1h")):
        assert json.loads(json.dumps(fig)) == fig
