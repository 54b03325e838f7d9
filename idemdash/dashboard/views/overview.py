"""The overview: the figures and charts of one time window, kept in the session."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from idemdash.dashboard import alerts, charts, health, queries
from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.views.pages import partial_or_page
from receipts.conf import setting

OVERVIEW_WINDOW_KEY = "overview_window"


def _overview_context(window: queries.Window) -> dict[str, Any]:
    now = timezone.now()
    series = queries.receipt_series(window, now)
    flow = queries.flow_series(window, now)
    history = queries.history_series(window, now)
    unprotected = queries.unprotected_series(window, now)
    fresh = queries.fresh_key_series(window, now)
    alert_panel = alerts.overview_alerts(window, now)
    return {
        "window": window,
        "windows": list(queries.WINDOWS),
        "stats": queries.overview_stats(window, now),
        "clusters": queries.worker_clusters(),
        "now": now,
        "charts": [
            ("chart-traffic", charts.traffic_chart(series, window.name)),
            ("chart-duplicates", charts.duplicate_rate_chart(series, window.name)),
            ("chart-conflicts", charts.conflicts_chart(series, window.name)),
            ("chart-unprotected", charts.unprotected_chart(unprotected, window.name)),
            ("chart-fresh-keys", charts.fresh_key_chart(fresh, window.name)),
            ("chart-stuck", charts.stuck_chart(series, flow, window.name)),
            ("chart-webhooks", charts.webhook_chart(flow, window.name)),
            ("chart-outbox", charts.outbox_chart(flow, window.name)),
            ("chart-latency", charts.latency_chart(history, window.name)),
            ("chart-backlog", charts.backlog_age_chart(history, window.name)),
        ],
        "with_charts": True,
        "alert_panel": alert_panel,
        # Observed (and its transitions recorded) on every load: the figures are read anyway.
        "health": health.summary(health.observe(now), alert_panel["firing"],
                                 queries.failure_culprits(now - timedelta(minutes=health.window_minutes()))),
        "paused": queries.paused_work(),
        # What the unprotected and fresh-key tiles' notes name: their look-backs.
        "observer": {"window": setting("RECEIPTS_OBSERVE_WINDOW_SECONDS"),
                     "fresh_key_window": setting("RECEIPTS_FRESH_KEY_WINDOW_SECONDS")},
    }


@require_GET
@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    # The window chosen last is kept in the session: a reload, or a visit to another page
    # and back, shows the same window; `?window=` changes it.
    remembered = request.session.get(OVERVIEW_WINDOW_KEY)
    if remembered not in queries.WINDOWS:
        remembered = queries.OVERVIEW_DEFAULT_WINDOW
    try:
        window = queries.parse_window(request.GET.get("window"), default=remembered)
    except queries.BadWindow as exc:
        messages.error(request, str(exc))
        window = queries.WINDOWS[remembered]
    if window.name != request.session.get(OVERVIEW_WINDOW_KEY):
        request.session[OVERVIEW_WINDOW_KEY] = window.name
    return partial_or_page(request, "dashboard/overview.html", "dashboard/partials/overview_figures.html",
                            _overview_context(window))
