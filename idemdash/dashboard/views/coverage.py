"""The Coverage page: every write route of the project's URLconf, protected or not, with each
operation's keys and duplicates in the last 24 hours (receipts/coverage.py)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from idemdash.dashboard.access import viewer_required
from receipts import coverage as receipts_coverage
from receipts import fresh_keys
from receipts.conf import setting


@require_GET
@viewer_required
def coverage(request: HttpRequest) -> HttpResponse:
    rows = receipts_coverage.table(receipts_coverage.routes())
    # What nothing protects first, the most duplicated first: the routes to look at.
    rows.sort(key=lambda row: (row["protected"], -(row["duplicates"] or 0)))
    return render(request, "dashboard/coverage.html", {
        "rows": rows, "protected": sum(row["protected"] for row in rows),
        "window": setting("RECEIPTS_OBSERVE_WINDOW_SECONDS"), "recent": receipts_coverage.recent_duplicates(),
        "fresh_key_window": setting("RECEIPTS_FRESH_KEY_WINDOW_SECONDS"), "fresh": fresh_keys.recent(),
    })
