"""Bulk actions from the dashboard: release failed receipts, reprocess dead events, send dead
outbox messages again: each kind's `bulk` in the registry (idemdash/core/actions.py), offered
under the list whose filter picks its rows (BULK).

GET previews what the action would touch (how many rows, the first of them by key, the
filter in the words of the list's form); POST (operators) starts a bulk run in the worker
(idemdash/core/bulk_runs.py:start: one compare-and-set and one audit entry per row, grouped under
the run's own entry) and sends the operator to the run's page, whose summary follows it
live (requeued, then each row's outcome) until every row has settled, and can cancel it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from idemdash.core import actions, audit, bulk_runs
from idemdash.core.actions import BulkAction
from idemdash.core.bulk import BULK_LIMIT
from idemdash.core.bulk_runs import BulkItem, BulkRun
from idemdash.dashboard.access import OPERATE, operator_required, viewer_required
from idemdash.dashboard.forms import EventFilter, OutboxFilter, ReceiptFilter
from idemdash.dashboard.views.pages import describe_filter, partial_or_page
from receipts import references

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

# The list each kind's bulk runs go back to.
LIST_OF_KIND = {page.kind: page for page in BULK.values()}

# Parameters of the confirmation form that are not filters.
NOT_FILTERS = ("csrfmiddlewaretoken", "reason", "expected", "after", "sort")


def _params(request: HttpRequest, spec: BulkAction) -> QueryDict:
    params = (request.POST if request.method == "POST" else request.GET).copy()
    for name in NOT_FILTERS:
        params.pop(name, None)
    params["status"] = spec.status
    return params


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
        run = bulk_runs.start(
            page.kind, targets, actor=request.user.get_username(), user=request.user,
            reason=audit.cut(request.POST.get("reason", "")) or f"bulk {spec.verb.lower()} from the dashboard",
            filters="; ".join(f"{label}: {value}" for label, value in context["filters"]),
        )
        expected = request.POST.get("expected", "")
        if expected.isdigit() and int(expected) != matched:
            messages.info(request, f"The preview counted {expected}; {matched} matched when you confirmed.")
        url = reverse("dashboard:bulk_run", args=[run.pk])
        return redirect(f"{url}?{urlencode({'back': params.urlencode()})}")
    first_rows = list(targets.order_by("id")[:PREVIEW_ROWS])
    context.update({
        "count": matched,
        # How many of them failed last in a way no retry changes (idemdash/core/actions.py:Kind.lasting).
        "lasting": unit_kind.lasting_count(targets) if matched else 0,
        # How many already caused a message that was sent (receipts/references.py).
        "sent_side_effects": references.with_sent_side_effects(targets)
        if matched and unit_kind.name in ("receipt", "event") else 0,
        "first_rows": [(unit_kind.row_key(row), reverse(f"dashboard:{unit_kind.name}", args=[row.pk]))
                       for row in first_rows],
        "hidden": list(params.items()),
    })
    return render(request, "dashboard/bulk_flow.html", context)


def _run_context(request: HttpRequest, run: BulkRun) -> dict[str, Any]:
    spec = actions.kind(run.kind).bulk
    page = LIST_OF_KIND[run.kind]
    back = request.GET.get("back", "")
    return {
        "run": run, "spec": spec, "progress": bulk_runs.progress(run), "title": page.title,
        # Only a query string is taken from the URL: back to the list with the run's filter.
        "back": f"{reverse(page.list_url)}?{QueryDict(back).urlencode()}" if back else reverse(page.list_url),
        "refused": list(run.items.filter(status=BulkItem.Status.REFUSED).order_by("id")[:PREVIEW_ROWS]),
        "audit_url": f"{reverse('dashboard:audit')}?{urlencode({'run': run.pk})}",
    }


@require_GET
@viewer_required
def bulk_run(request: HttpRequest, pk: int) -> HttpResponse:
    """A bulk run's summary; under htmx only the summary, which polls itself until the run is over."""
    run = get_object_or_404(BulkRun.objects.select_related("user"), pk=pk)
    return partial_or_page(request, "dashboard/bulk_run.html", "dashboard/partials/bulk_run_summary.html",
                           _run_context(request, run))


@require_POST
@operator_required
def bulk_run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    """Cancel a run: idempotent (a run that is over stays as it is, and is not audited again)."""
    run = get_object_or_404(BulkRun, pk=pk)
    if bulk_runs.cancel(run, actor=request.user.get_username(), user=request.user):
        messages.success(request, "Cancelled: items already started finish, the rest are left as they were.")
    else:
        messages.info(request, f"This run is {run.status}: nothing to cancel.")
    query = request.GET.urlencode()
    return redirect(f"{reverse('dashboard:bulk_run', args=[run.pk])}{'?' + query if query else ''}")
