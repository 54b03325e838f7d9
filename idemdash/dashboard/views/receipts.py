"""Receipt pages: the filtered list and one receipt's page (its summary, policy, conflicts and
attempt timeline). Its action, release, is receipts/operator_actions.py's, served by
idemdash/dashboard/views/actions.py."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.views.decorators.http import require_GET

from idemdash.dashboard import conflicts, queries
from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.forms import ReceiptFilter
from idemdash.dashboard.queries import latest
from idemdash.dashboard.views.pages import LOG_LIMIT, detail_page, filtered_list
from receipts import fresh_keys
from receipts.conf import policy_for
from receipts.downstream import downstream_key
from receipts.models import Attempt, Receipt

Status = Receipt.Status

@require_GET
@viewer_required
def receipts(request: HttpRequest) -> HttpResponse:
    return filtered_list(request, ReceiptFilter(request.GET), "dashboard/receipts.html",
                         "dashboard/partials/receipt_table.html", decorate=_with_duplicate_counts)


def _with_duplicate_counts(rows: list[Receipt]) -> None:
    counts = queries.duplicate_counts([r.pk for r in rows])
    for r in rows:
        r.duplicates = counts[r.pk]


def _pretty(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


# A retry storm can leave thousands of 422s on one key; the page shows the latest ones.
CONFLICT_LIMIT = 20


def summary(receipt: Receipt) -> tuple[str, dict[str, Any]]:
    policy = policy_for(receipt.operation)
    return "dashboard/partials/receipt_summary.html", {
        "receipt": receipt,
        # From today's settings: the policy a claim of this operation gets now.
        "policy": {**policy.as_dict(), "source": policy.matched()},
        "downstream_key": downstream_key(receipt.scope, receipt.key, receipt.created_at),
        # The caller's other keys that made the same request within the window.
        "same_request": fresh_keys.same_request(receipt),
        "lease_expired": bool(receipt.lease_expires_at and receipt.lease_expires_at < timezone.now()),
        # Not final: the page polls its summary and timeline until the outcome lands.
        "live": receipt.released or receipt.status == Status.PROCESSING,
    }


@require_GET
@viewer_required
def receipt_detail(request: HttpRequest, pk: int) -> HttpResponse:
    receipt = get_object_or_404(Receipt, pk=pk)
    attempts = Attempt.objects.filter(receipt=receipt)
    timeline, timeline_total = latest(attempts, "-created_at", "-id", limit=LOG_LIMIT)
    rejected, mismatch_total = latest(
        attempts.filter(outcome=Attempt.Outcome.MISMATCH), "-created_at", "-id", limit=CONFLICT_LIMIT
    )
    mismatches = [
        {"attempt": a, "differences": conflicts.diff_requests(receipt.request, a.request),
         "pretty": _pretty(a.request)}
        for a in rejected
    ]
    return detail_page(request, "dashboard/receipt_detail.html", summary, receipt, attempts=timeline,
                       attempt_total=timeline_total, mismatch_total=mismatch_total, mismatches=mismatches,
                       request_pretty=_pretty(receipt.request), response_pretty=_pretty(receipt.response_body))
