"""Bulk actions from the dashboard: release failed receipts, reprocess dead events, send dead
outbox messages again: each kind's `bulk` in the registry (idemdash/core/actions.py), offered
under the list whose filter picks its rows (BULK).

GET previews what the action would touch (how many rows, the first of them by key, the
filter in the words of the list's form); POST (operators) runs the domain function's
`..._many` (idemdash/core/bulk.py:each: one compare-and-set and one audit entry per row) and shows
what changed, with a link to exactly the audit entries it wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from idemdash.core import actions
from idemdash.core.actions import BulkAction
from idemdash.core.audit import AuditEntry
from idemdash.core.bulk import BULK_LIMIT
from idemdash.dashboard.access import OPERATE, viewer_required
from idemdash.dashboard.forms import EventFilter, OutboxFilter, ReceiptFilter
from idemdash.dashboard.views.pages import describe_filter

# How many of the touched rows the preview names.
PREVIEW_ROWS = 10


@dataclass(frozen=True)
class BulkPage:
    """Where a kind's bulk action (idemdash/core/actions.py:Kind.bulk) sits in the dashboard:
    the list whose filter picks its rows. The URL kwarg `kind` is the list's name."""

    kind: str  # the registry's kind
    form: type[forms.Form]
    title: str  # the list's title
    list_url: str  # URL names
    url: str


BULK: dict[str, BulkPage] = {
    "receipts": BulkPage("receipt", ReceiptFilter, "Receipts", "dashboard:receipts", "dashboard:receipts_bulk"),
    "events": BulkPage("event", EventFilter, "Webhook events", "dashboard:events", "dashboard:events_bulk"),
    "outbox": BulkPage("message", OutboxFilter, "Outbox", "dashboard:outbox", "dashboard:outbox_bulk"),
}

# Parameters of the confirmation form that are not filters.
NOT_FILTERS = ("csrfmiddlewaretoken", "reason", "expected", "after", "sort")


def _params(request: HttpRequest, spec: BulkAction) -> QueryDict:
    params = (request.POST if request.method == "POST" else request.GET).copy()
    for name in NOT_FILTERS:
        params.pop(name, None)
    params["status"] = spec.status
    return params


def _audit_url(actor: str, action: str, after_id: int, through_id: int) -> str:
    query = urlencode({"actor": actor, "action": action, "after_id": after_id, "through_id": through_id})
    return f"{reverse('dashboard:audit')}?{query}"


def _last_audit_id() -> int:
    return AuditEntry.objects.aggregate(last=Max("id"))["last"] or 0


@require_http_methods(["GET", "POST"])
@viewer_required
def bulk_action(request: HttpRequest, kind: str) -> HttpResponse:
    page = BULK[kind]
    unit_kind = actions.kind(page.kind)
    spec = unit_kind.bulk
    params = _params(request, spec)
    form = page.form(params)
    back = f"{reverse(page.list_url)}?{params.urlencode()}"
    context: dict[str, Any] = {
        "form": form, "spec": spec, "title": page.title, "back": back, "action_url": reverse(page.url),
        "limit": BULK_LIMIT,
    }
    if not form.is_valid():
        return render(request, "dashboard/bulk_flow.html", context, status=400)
    targets = form.rows()
    context["filters"] = describe_filter(form)
    matched = targets.count()
    if request.method == "POST":
        if not request.user.has_perm(OPERATE):
            raise PermissionDenied("Only operators may act.")
        actor = request.user.get_username()
        first = _last_audit_id()
        result = spec.run_many(
            targets, actor=actor, user=request.user,
            reason=request.POST.get("reason", "").strip()[:500] or f"bulk {spec.verb.lower()} from the dashboard",
        )
        expected = request.POST.get("expected", "")
        context.update({
            "result": result,
            "matched": matched,
            "expected": int(expected) if expected.isdigit() else None,
            "left": max(0, matched - result.done - result.skipped),
            "audit_url": _audit_url(actor, spec.audit_action, first, _last_audit_id()),
        })
        return render(request, "dashboard/bulk_flow.html", context)
    first_rows = list(targets.order_by("id")[:PREVIEW_ROWS])
    context.update({
        "count": matched,
        # How many of them failed last in a way no retry changes (idemdash/core/actions.py:Kind.lasting).
        "lasting": unit_kind.lasting_count(targets) if matched else 0,
        "first_rows": [(unit_kind.row_key(row), reverse(f"dashboard:{unit_kind.name}", args=[row.pk]))
                       for row in first_rows],
        "hidden": list(params.items()),
    })
    return render(request, "dashboard/bulk_flow.html", context)
