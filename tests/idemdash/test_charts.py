from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from idemdash import charts

T0 = datetime(2026, 3, 10, tzinfo=timezone.utc)


def row(i: int, **counts: int) -> dict:
    base = {"claimed": 0, "replayed": 0, "in_progress": 0, "mismatch": 0, "retried_after_failure": 0,
            "lease_takeover": 0, "released": 0, **counts}
    base["requests"] = sum(base[k] for k in ("claimed", "replayed", "in_progress", "mismatch",
                                             "retried_after_failure", "lease_takeover"))
    base["duplicates"] = base["replayed"] + base["in_progress"] + base["mismatch"]
    return {"start": T0 + timedelta(hours=i), **base}


SERIES = [row(0, claimed=3, replayed=1), row(1), row(2, claimed=1, in_progress=2, mismatch=1, lease_takeover=1, released=2)]


def test_the_duplicate_rate_is_a_percentage_with_gaps_where_there_was_no_traffic():
    fig = charts.duplicate_rate_chart(SERIES)
    assert fig["data"][0]["y"] == [25.0, None, 60.0]
    assert fig["data"][0]["x"][0] == T0.isoformat()


def test_conflicts_are_stacked_409s_and_422s():
    fig = charts.conflicts_chart(SERIES)
    assert [t["name"] for t in fig["data"]] == ["409 in progress", "422 mismatch"]
    assert fig["data"][0]["y"] == [0, 0, 2] and fig["data"][1]["y"] == [0, 0, 1]
    assert fig["layout"]["barmode"] == "stack"


def test_stuck_leases_are_counted_by_takeover_and_by_release():
    fig = charts.stuck_chart(SERIES)
    assert fig["data"][0]["y"] == [0, 0, 1] and fig["data"][1]["y"] == [0, 0, 2]


def test_traffic_shows_requests_and_duplicates_and_every_figure_is_plain_json():
    fig = charts.traffic_chart(SERIES)
    assert fig["data"][0]["y"] == [4, 0, 5] and fig["data"][1]["y"] == [1, 0, 3]
    for f in (fig, charts.duplicate_rate_chart(SERIES), charts.conflicts_chart(SERIES), charts.stuck_chart(SERIES)):
        assert json.loads(json.dumps(f)) == f
