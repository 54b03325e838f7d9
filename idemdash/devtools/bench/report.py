"""Figures, and the three ways they leave a run: a table, JSON, and a Plotly chart."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots


@dataclass
class Figure:
    id: str
    scenario: str
    label: str
    value: float | None
    unit: str
    # A target is an operator and a bound: ">=" 0.8 means the value must be at least 0.8.
    op: str | None = None
    bound: float | None = None
    note: str = ""

    @property
    def target(self) -> str:
        return f"{self.op} {self.bound:g}" if self.op else ""

    @property
    def met(self) -> bool | None:
        if self.op is None or self.value is None:
            return None
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "target": self.target, "met": self.met}


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.1f} {unit}"


def table(figures: list[Figure]) -> str:
    rows = [("scenario", "figure", "value", "target", "met")]
    for f in figures:
        met = {True: "met", False: "NOT MET", None: "-" if not f.op else "n/a"}[f.met]
        rows.append((f.scenario, f.label, _fmt(f.value, f.unit), f.target, met))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = dict.fromkeys(f"  {f.scenario}: {f.note}" for f in figures if f.note)
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


def markdown_table(figures: list[Figure]) -> str:
    lines = ["| scenario | figure | value | target | met |", "| --- | --- | --- | --- | --- |"]
    for f in figures:
        met = {True: "met", False: "**not met**", None: "n/a" if f.op else ""}[f.met]
        lines.append(f"| {f.scenario} | {f.label} | {_fmt(f.value, f.unit)} | {f.target} | {met} |")
    return "\n".join(lines)


def write_json(path: Path, meta: dict, figures: list[Figure], details: dict) -> None:
    path.write_text(json.dumps(
        {"meta": meta, "figures": [f.as_dict() for f in figures], "details": details}, indent=2, default=str
    ))


def chart(meta: dict, figures: list[Figure], details: dict) -> go.Figure:
    """Four panels: throughput of each compared variant, its latency, the dashboard's
    timings against their targets, and claim p99 round by round around the purge."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=(
        "Throughput, median of rounds (req/s)", "Latency, median of rounds (ms)",
        "Dashboard at scale, p95 (ms) vs target", "Claim p99 per round around the purge (ms)",
    ))
    variants = details.get("variants", {})
    names = list(variants)
    fig.add_trace(go.Bar(x=names, y=[variants[n]["throughput_rps"] for n in names], name="req/s"), 1, 1)
    for p in ("p50_ms", "p99_ms"):
        fig.add_trace(go.Bar(x=names, y=[variants[n][p] for n in names], name=p.replace("_ms", "")), 1, 2)
    pages = [f for f in figures if f.id.startswith("dashboard.") and f.value is not None]
    fig.add_trace(go.Bar(x=[f.label for f in pages], y=[f.value for f in pages], name="p95"), 2, 1)
    fig.add_trace(go.Scatter(x=[f.label for f in pages if f.bound], y=[f.bound for f in pages if f.bound],
                             mode="markers", marker_symbol="line-ew-open", marker_size=30, name="target"), 2, 1)
    purge_rounds = details.get("purge", {}).get("claim_rounds", [])
    if purge_rounds:
        fig.add_trace(go.Scatter(x=list(range(1, len(purge_rounds) + 1)), y=[r["p99_ms"] for r in purge_rounds],
                                 mode="lines+markers", text=[r["phase"] for r in purge_rounds], name="claim p99"), 2, 2)
    fig.update_layout(
        title=f"idemdash bench ({meta['mode']}) {meta['started_at']} on {meta['cores']} cores",
        barmode="group", height=800,
    )
    return fig


def write_chart(path: Path, meta: dict, figures: list[Figure], details: dict) -> None:
    # "directory": plotly.min.js is written once beside the HTML and loaded from there; no CDN.
    chart(meta, figures, details).write_html(str(path), include_plotlyjs="directory", full_html=True)
