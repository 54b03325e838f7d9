"""One pure function per chart: series rows in, a Plotly figure (plain JSON dict) out."""

from __future__ import annotations

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


def _layout(title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        # "none" keeps plotly's default template (several KB of JSON) out of every figure.
        "template": "none",
        "title": {"text": title, "font": {"size": 14, "color": INK}, "x": 0, "xanchor": "left"},
        "margin": {"l": 44, "r": 12, "t": 36, "b": 36},
        "height": 260,
        "font": {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12, "color": MUTED},
        "xaxis": {"type": "date", "gridcolor": GRID, "linecolor": GRID},
        "yaxis": {"title": {"text": y_title}, "gridcolor": GRID, "zeroline": False, "rangemode": "tozero"},
        "legend": {"orientation": "h", "y": -0.2},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        **extra,
    }


def _x(series: list[dict[str, Any]]) -> list[str]:
    return [row["start"].isoformat() for row in series]


def _figure(data: list[Any], layout: dict[str, Any]) -> dict[str, Any]:
    return go.Figure(data=data, layout=layout).to_plotly_json()


def duplicate_rate_chart(series: list[dict[str, Any]]) -> dict[str, Any]:
    """Share of claim requests that did not run (replay, 409, 422) per bucket, in percent."""
    rate = [
        round(100 * row["duplicates"] / row["requests"], 2) if row["requests"] else None
        for row in series
    ]
    return _figure(
        [go.Scatter(x=_x(series), y=rate, mode="lines+markers", name="duplicate rate",
                    line={"color": BLUE, "width": 2}, connectgaps=False,
                    hovertemplate="%{y:.2f}%<extra></extra>")],
        _layout("Duplicate rate", "% of requests", yaxis={
            "title": {"text": "% of requests"}, "gridcolor": GRID, "range": [0, 100], "zeroline": False}),
    )


def conflicts_chart(series: list[dict[str, Any]]) -> dict[str, Any]:
    x = _x(series)
    return _figure(
        [
            go.Bar(x=x, y=[r["in_progress"] for r in series], name="409 in progress", marker={"color": AMBER}),
            go.Bar(x=x, y=[r["mismatch"] for r in series], name="422 mismatch", marker={"color": RED}),
        ],
        _layout("Conflicts", "requests", barmode="stack"),
    )


def stuck_chart(series: list[dict[str, Any]], flow: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Stuck leases per bucket, seen when they were recovered: a receipt taken over by the
    next claim, an outbox message whose drainer finished after losing its lease, or a row of
    any store released by an operator. (How many rows were stuck at a past instant is not
    stored, and the webhook sweeper's recoveries are counted on the event, not in time.)"""
    x = _x(series)
    data = [
        go.Bar(x=x, y=[r["lease_takeover"] for r in series], name="receipt takeovers", marker={"color": VIOLET}),
        go.Bar(x=x, y=[r["released"] for r in series], name="receipts released", marker={"color": MUTED}),
    ]
    if flow is not None:
        data += [
            go.Bar(x=x, y=[r["stale"] for r in flow], name="outbox lease lost", marker={"color": AMBER}),
            go.Bar(x=x, y=[r["events_released"] + r["messages_released"] for r in flow],
                   name="events / messages released", marker={"color": RED}),
        ]
    # Four legend entries wrap to several lines on a phone: anchor the legend's top below
    # the date ticks and leave it room, so it never covers them.
    return _figure(data, _layout("Stuck leases recovered", "rows", barmode="stack",
                                 legend={"orientation": "h", "y": -0.3, "yanchor": "top"},
                                 margin={"l": 44, "r": 12, "t": 36, "b": 90}, height=310))


def webhook_chart(flow: list[dict[str, Any]]) -> dict[str, Any]:
    """Every stored delivery against the new unique events among them: the gap is provider
    redeliveries that deduplication absorbed."""
    x = _x(flow)
    return _figure(
        [
            go.Scatter(x=x, y=[r["deliveries"] for r in flow], name="deliveries", mode="lines",
                       line={"color": INK, "width": 2}),
            go.Scatter(x=x, y=[r["events"] for r in flow], name="unique events", mode="lines",
                       line={"color": GREEN, "width": 2}, fill="tozeroy"),
        ],
        _layout("Webhook deliveries vs unique events", "per bucket"),
    )


def outbox_chart(flow: list[dict[str, Any]]) -> dict[str, Any]:
    """Messages enqueued against messages sent (and died) per bucket: when enqueued stays
    above sent, the backlog grows. The backlog itself is a tile (it is known only now)."""
    x = _x(flow)
    return _figure(
        [
            go.Bar(x=x, y=[r["enqueued"] for r in flow], name="enqueued", marker={"color": BLUE}),
            go.Bar(x=x, y=[r["sent"] for r in flow], name="sent", marker={"color": GREEN}),
            go.Bar(x=x, y=[r["died"] for r in flow], name="died", marker={"color": RED}),
        ],
        _layout("Outbox: enqueued vs sent", "messages", barmode="group"),
    )


def traffic_chart(series: list[dict[str, Any]]) -> dict[str, Any]:
    x = _x(series)
    return _figure(
        [
            go.Scatter(x=x, y=[r["requests"] for r in series], name="requests", mode="lines",
                       line={"color": INK, "width": 2}),
            go.Scatter(x=x, y=[r["duplicates"] for r in series], name="duplicates", mode="lines",
                       line={"color": BLUE, "width": 2}, fill="tozeroy"),
        ],
        _layout("Claim requests", "requests"),
    )
