"""One pure function per chart: bucket rows in, a Plotly figure (plain JSON dict) out.

The rows are `queries.receipt_series` / `flow_series` buckets: each has its `start`, `end`
and whether it is `partial` (the current bucket, still filling). Every chart reads the same
way (docs/dashboard.md, "How the charts read"): counts are bars, one per bucket, since a line
between two buckets would draw counts that never happened; rates are lines in percent, which
leave the current bucket out (a few seconds of traffic make a rate that swings); the current
bucket, and a first bucket the window starts inside (`cut`), are hatched and lighter; a
hover shows every series of a bucket; a chart with nothing to show says why, on the chart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

INK = "#1f2933"
MUTED = "#616e7c"
GRID = "#e4e7eb"
BLUE = "#2563eb"
AMBER = "#d97706"
RED = "#dc2626"
VIOLET = "#7c3aed"
GREEN = "#059669"
SLATE = "#9aa5b1"

PARTIAL_OPACITY = 0.45

Rows = Sequence[dict[str, Any]]


def bucket_text(rows: Rows) -> str:
    """The bucket width as people say it: "5 min", "hour", "6 h", "day"."""
    if not rows:
        return "bucket"
    seconds = int((rows[0]["end"] - rows[0]["start"]).total_seconds())
    if seconds % 86400 == 0:
        return "day" if seconds == 86400 else f"{seconds // 86400} days"
    if seconds % 3600 == 0:
        return "hour" if seconds == 3600 else f"{seconds // 3600} h"
    return f"{seconds // 60} min"


def range_text(row: dict[str, Any]) -> str:
    """"05:50–05:55 UTC" (the hover's title gives the day), or "Nov 24 00:00 – Nov 25 00:00
    UTC" for a bucket that crosses midnight; "in progress" for the bucket still filling,
    "counted from 05:12" for a first bucket the window starts in."""
    start, end = row["start"], row["end"]
    if start.date() == end.date():
        text = f"{start:%H:%M}–{end:%H:%M} UTC"
    else:
        text = f"{start:%b %d %H:%M} – {end:%b %d %H:%M} UTC"
    if row.get("cut"):
        text += f" · counted from {row['cut']:%H:%M:%S} (the window's start)"
    return f"{text} · in progress" if row.get("partial") else text


def _x(rows: Rows) -> list[str]:
    """Each bucket at its middle, so that its bar covers its own time span."""
    return [(row["start"] + (row["end"] - row["start"]) / 2).isoformat() for row in rows]


def _layout(title: str, y_title: str, rows: Rows, subtitle: str = "per {per} · UTC", **extra: Any) -> dict[str, Any]:
    """`y_title` and `subtitle` may say "{per}": the bucket's width."""
    per = bucket_text(rows)
    return {
        # "none" keeps plotly's default template (several KB of JSON) out of every figure.
        "template": "none",
        # The subtitle, not a <span style> in the title: Plotly would write that as a style
        # attribute, which the Content-Security-Policy refuses (idemdash/settings.py).
        "title": {"text": title, "font": {"size": 14, "color": INK}, "x": 0, "xanchor": "left",
                  "subtitle": {"text": subtitle.format(per=per), "font": {"size": 12, "color": MUTED}}},
        "margin": {"l": 52, "r": 12, "t": 54, "b": 36},  # t: the title and its subtitle
        "height": 276,
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12, "color": MUTED},
        "xaxis": {"type": "date", "gridcolor": GRID, "linecolor": GRID,
                  # The hover box's first line; the bucket's own range follows it.
                  "unifiedhovertitle": {"text": "%{x|%a %b %d}"}},
        "yaxis": {"title": {"text": y_title.format(per=per)}, "gridcolor": GRID, "zeroline": False,
                  "rangemode": "tozero"},
        # "normal": the hover box lists the bucket first, then the series in legend order
        # (stacked bars would otherwise reverse both).
        "legend": {"orientation": "h", "y": -0.2, "traceorder": "normal"},
        "hovermode": "x unified",
        "hoverlabel": {"bgcolor": "white", "bordercolor": GRID, "font": {"color": INK}},
        "bargap": 0.15,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        **extra,
    }


def _bucket_trace(rows: Rows, notes: list[str] | None = None) -> go.Scatter:
    """Invisible: its hover line is the bucket's range (and a note), above the series."""
    text = [range_text(r) + (f" · {notes[i]}" if notes and notes[i] else "") for i, r in enumerate(rows)]
    return go.Scatter(x=_x(rows), y=[0] * len(rows), mode="markers", marker={"opacity": 0, "color": INK},
                      # Bold by its font, not <b>: Plotly would write that as a style attribute.
                      customdata=text, hovertemplate="%{customdata}<extra></extra>",
                      hoverlabel={"font": {"weight": "bold"}},
                      showlegend=False, name="bucket")


def _bars(rows: Rows, values: list[int], name: str, color: str) -> go.Bar:
    partial = [bool(r.get("partial") or r.get("cut")) for r in rows]
    return go.Bar(
        x=_x(rows), y=values, name=name,
        marker={"color": color, "opacity": [PARTIAL_OPACITY if p else 1 for p in partial],
                "pattern": {"shape": ["/" if p else "" for p in partial], "fgcolor": "white", "size": 6,
                            "fillmode": "overlay"}},
        hovertemplate=f"{name}: %{{y}}<extra></extra>",
    )


def _figure(data: list[Any], layout: dict[str, Any], empty_reason: str | None) -> dict[str, Any]:
    if empty_reason is not None:  # said on the chart, over an empty axis
        layout["annotations"] = [{"text": empty_reason, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
                                  "showarrow": False, "font": {"size": 13, "color": MUTED}}]
        layout["yaxis"] = {**layout["yaxis"], "range": [0, 1], "showticklabels": False}
        layout["showlegend"] = False
    figure = go.Figure(data=data, layout=layout).to_plotly_json()
    figure["empty"] = empty_reason
    return figure


Column = tuple[list[int], str, str]  # values per bucket, series name, colour


def _bar_chart(rows: Rows, title: str, unit: str, columns: list[Column], empty_reason: str, *,
               barmode: str = "stack", totals: bool = False, **layout: Any) -> dict[str, Any]:
    """Bars of `columns` per bucket under the bucket trace; `empty_reason` when all are 0.
    With `totals`, each bucket's hover names the stack's height ("12 requests")."""
    notes = [f"{sum(values[i] for values, _, _ in columns)} {unit}" for i in range(len(rows))] if totals else None
    data = [_bucket_trace(rows, notes)] + [_bars(rows, values, name, color) for values, name, color in columns]
    quiet = not any(any(values) for values, _, _ in columns)
    return _figure(data, _layout(title, f"{unit} per {{per}}", rows, barmode=barmode, **layout), empty_reason if quiet else None)


def traffic_chart(series: Rows, window: str) -> dict[str, Any]:
    """Claim requests per bucket, stacked: those that ran the operation and the duplicates
    (replays, concurrent duplicates, 422s) that did not. The stack's height is every claim request."""
    return _bar_chart(series, "Claim requests", "requests", [
        ([r["requests"] - r["duplicates"] for r in series], "ran", INK),
        ([r["duplicates"] for r in series], "duplicates (not run)", BLUE),
    ], f"No claim requests in the last {window}", totals=True)


def unprotected_chart(series: Rows, window: str) -> dict[str, Any]:
    """Write requests to routes nothing protects per bucket, stacked: those that repeated no
    earlier one and the would-be duplicates, which ran their side effect again
    (`queries.unprotected_series`). The stack's height is every noted request."""
    return _bar_chart(series, "Unprotected write requests", "requests", [
        ([r["requests"] - r["duplicates"] for r in series], "not a repeat", INK),
        ([r["duplicates"] for r in series], "would-be duplicates (ran again)", RED),
    ], f"No write requests to unprotected routes in the last {window}", totals=True)


def fresh_key_chart(series: Rows, window: str) -> dict[str, Any]:
    """The same requests under new keys per bucket, stacked: those that ran their side effect
    again and those refused with 409 (`queries.fresh_key_series`)."""
    return _bar_chart(series, "Fresh-key retries", "retries", [
        ([r["ran_again"] for r in series], "ran again (new key)", RED),
        ([r["refused"] for r in series], "refused (409 fresh-key-retry)", BLUE),
    ], f"No request repeated under a new key in the last {window}", totals=True)


def duplicate_rate_chart(series: Rows, window: str) -> dict[str, Any]:
    """Share of claim requests that did not run (replay, 409 or waited, 422) per bucket, in percent.
    A bucket without requests has no rate (a gap). The bucket in progress is not on the
    line: its rate so far is a hollow marker, apart."""
    def rate(r: dict[str, Any]) -> float | None:
        return round(100 * r["duplicates"] / r["requests"], 2) if r["requests"] else None

    notes = [f"{r['duplicates']} of {r['requests']} requests" if r["requests"] else "no requests" for r in series]
    x = _x(series)
    data = [
        _bucket_trace(series, notes),
        go.Scatter(x=x, y=[None if r.get("partial") else rate(r) for r in series], mode="lines+markers",
                   name="duplicate rate", line={"color": BLUE, "width": 2}, connectgaps=False,
                   hovertemplate="duplicate rate: %{y:.2f}%<extra></extra>"),
        go.Scatter(x=x, y=[rate(r) if r.get("partial") else None for r in series], mode="markers",
                   name="so far (bucket in progress)",
                   marker={"color": "white", "size": 8, "line": {"color": BLUE, "width": 2}},
                   hovertemplate="so far: %{y:.2f}%<extra></extra>"),
    ]
    layout = _layout("Duplicate rate", "% of requests", series, "% of claim requests per {per} · UTC")
    layout["yaxis"] = {**layout["yaxis"], "range": [0, 100], "ticksuffix": "%"}
    quiet = not any(r["requests"] for r in series)
    return _figure(data, layout, f"No claim requests in the last {window}" if quiet else None)


def conflicts_chart(series: Rows, window: str) -> dict[str, Any]:
    """Duplicates that met the key while its first attempt ran (answered 409, or waited for
    its result) and reuses with another request (422), per bucket."""
    return _bar_chart(series, "Conflicts", "requests", [
        ([r["in_progress"] for r in series], "409 in progress", AMBER),
        ([r["waited"] for r in series], "waited for the first", VIOLET),
        ([r["mismatch"] for r in series], "422 mismatch", RED),
    ], f"No concurrent duplicates or 422 answers in the last {window}")


def stuck_chart(series: Rows, flow: Rows | None, window: str) -> dict[str, Any]:
    """Stuck leases per bucket, seen when they were recovered: a receipt taken over by the
    next claim, an outbox message whose drainer finished after losing its lease, or a row of
    any store released by an operator. (How many rows were stuck at a past instant is not
    stored, and the webhook sweeper's recoveries are counted on the event, not in time.)"""
    columns = [
        ([r["lease_takeover"] for r in series], "receipt takeovers", VIOLET),
        ([r["released"] for r in series], "receipts released", SLATE),
    ]
    if flow is not None:
        columns += [
            ([r["stale"] for r in flow], "outbox lease lost", AMBER),
            ([r["events_released"] + r["messages_released"] for r in flow], "events / messages released", RED),
        ]
    # Four legend entries wrap to several lines on a phone: anchor the legend's top below
    # the date ticks and leave it room, so it never covers them.
    return _bar_chart(series, "Stuck leases recovered", "rows", columns,
                      f"No stuck lease recovered in the last {window}",
                      legend={"orientation": "h", "y": -0.3, "yanchor": "top", "traceorder": "normal"},
                      margin={"l": 52, "r": 12, "t": 36, "b": 90}, height=310)


def webhook_chart(flow: Rows, window: str) -> dict[str, Any]:
    """Stored deliveries per bucket, stacked: new unique events and the provider
    redeliveries that deduplication absorbed. The stack's height is every delivery."""
    return _bar_chart(flow, "Webhook deliveries", "deliveries", [
        ([r["events"] for r in flow], "unique events", GREEN),
        ([r["deliveries"] - r["events"] for r in flow], "redeliveries", SLATE),
    ], f"No webhook deliveries in the last {window}", totals=True)


def outbox_chart(flow: Rows, window: str) -> dict[str, Any]:
    """Messages enqueued against messages sent (and died) per bucket: when enqueued stays
    above sent, the backlog grows. The backlog itself is a tile (it is known only now)."""
    return _bar_chart(flow, "Outbox: enqueued vs sent", "messages", [
        ([r["enqueued"] for r in flow], "enqueued", BLUE),
        ([r["sent"] for r in flow], "sent", GREEN),
        ([r["died"] for r in flow], "died", RED),
    ], f"No outbox messages enqueued or sent in the last {window}", barmode="group")


HISTORY = "per {per}, from the hourly roll-ups · UTC"


def latency_chart(history: Rows, window: str) -> dict[str, Any]:
    """Claim, webhook processing and outbox send durations per bucket, p50 and p99, in
    milliseconds on a log axis (a 0.5 ms claim, a 20 ms p50 and a 30 s p99 on one chart).
    Each value is the upper bound of the histogram bucket the quantile falls in
    (`idemdash.core.attempts.percentile`); a bucket without runs has no value (a gap)."""
    x = _x(history)
    series = [("claim", "claim", VIOLET), ("processing", "processing", GREEN), ("send", "send", BLUE)]
    notes = [" · ".join(f"{r[f'{name}_runs']} {label}s" for name, label, _ in series) for r in history]
    data = [_bucket_trace(history, notes)]
    for name, label, color in series:
        for q, dash in (("p50", "solid"), ("p99", "dot")):
            data.append(go.Scatter(
                x=x, y=[r[f"{name}_{q}"] for r in history], mode="lines+markers", name=f"{label} {q}",
                line={"color": color, "width": 2, "dash": dash}, connectgaps=False,
                hovertemplate=f"{label} {q}: ≤ %{{y:,}} ms<extra></extra>",
            ))
    layout = _layout("Latency: claims, processing and send", "milliseconds", history, HISTORY)
    # Ticks at powers of ten only ("10", "100", "1000"): Plotly's default log ticks label
    # the 2s and 5s between them too, which reads as clutter at this height.
    layout["yaxis"] = {**layout["yaxis"], "type": "log", "rangemode": "normal", "dtick": 1}
    quiet = not any(r[f"{name}_runs"] for r in history for name, _, _ in series)
    return _figure(data, layout, f"No claims, webhook processing or outbox sends in the last {window}" if quiet else None)


def backlog_age_chart(history: Rows, window: str) -> dict[str, Any]:
    """The outbox backlog's age per bucket: how long the oldest waiting message had waited,
    at its worst, as the minute's roll-up run sampled it (the tile has it now)."""
    # A level, not a count: a line with a marker per sampled bucket (a sampled 0 shows as a
    # point on the axis), and a gap where nothing was sampled.
    ages = [r["backlog_age"] for r in history]
    data = [
        _bucket_trace(history, ["not sampled" if a is None else "" for a in ages]),
        go.Scatter(x=_x(history), y=ages, mode="lines+markers", name="oldest waiting, worst",
                   line={"color": AMBER, "width": 2}, connectgaps=False,
                   hovertemplate="oldest waiting, worst: %{y:,} s<extra></extra>"),
    ]
    layout = _layout("Outbox backlog age", "seconds", history, HISTORY)
    quiet = all(a is None for a in ages)
    return _figure(data, layout, f"No backlog sampled in the last {window} (the roll-up samples it every minute)"
                   if quiet else None)
