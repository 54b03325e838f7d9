from __future__ import annotations

import json

from idemdash.devtools.bench.report import Figure, table, write_chart, write_json


def test_a_figure_is_met_only_on_the_right_side_of_its_bound():
    assert Figure("x", "s", "ratio", 0.85, "x", ">=", 0.8).met is True
    assert Figure("x", "s", "ratio", 0.75, "x", ">=", 0.8).met is False
    assert Figure("x", "s", "p99", 49, "ms", "<=", 50).met is True
    assert Figure("x", "s", "p99", 51, "ms", "<=", 50).met is False
    assert Figure("x", "s", "rps", 100, "req/s").met is None
    assert Figure("x", "s", "ratio", None, "x", ">=", 0.8).met is None


def test_the_table_shows_every_figure_its_target_and_verdict():
    text = table([Figure("a", "1 claim", "ratio", 0.5, "x", ">=", 0.8),
                  Figure("b", "2 replay", "rps", None, "req/s", note="qcluster did not run")])
    assert "0.50x" in text and ">= 0.8" in text and "NOT MET" in text
    assert "n/a" in text and "qcluster did not run" in text


def test_json_and_chart_are_written(tmp_path):
    meta = {"mode": "quick", "started_at": "now", "cores": 2}
    figures = [Figure("dashboard.overview", "5", "overview p95", 120.0, "ms", "<=", 300)]
    details = {"variants": {"bare": {"throughput_rps": 10, "p50_ms": 1, "p99_ms": 2}},
               "purge": {"claim_rounds": [{"phase": "before", "p99_ms": 3}]}}
    write_json(tmp_path / "out.json", meta, figures, details)
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["figures"][0]["met"] is True and data["figures"][0]["target"] == "<= 300"
    write_chart(tmp_path / "out.html", meta, figures, details)
    html = (tmp_path / "out.html").read_text()
    assert "plotly.min.js" in html and "cdn" not in html.lower()
    assert (tmp_path / "plotly.min.js").exists()
