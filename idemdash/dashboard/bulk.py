"""Bulk actions from the dashboard: release failed receipts, reprocess dead events, send dead
outbox messages again.

GET previews what the action would touch (how many rows, the first of them by key, the
filter in the words of the list's form); POST (operators) runs the domain function's
`..._many` (idemdash/core/bulk.py:each: one compare-and-set and one audit entry per row) and shows
what changed, with a link to exactly the audit entries it wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.db.models import Max, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods

from idemdash.dashboard.access import OPERATE, viewer_required
from idemdash.dashboard.forms import EventFilter, OutboxFilter, ReceiptFilter
from receipts import store
from receipts.models import AuditEntry
from receipts.outbox import store as outbox_store
from webhooks import processing

# How many of the touched rows the preview names.
PREVIEW_ROWS = 10


@dataclass(frozen=True)
class BulkSpec:
    form: type[forms.Form]
    rows: Callable[[Any], QuerySet]  # the filter form's rows
    status: str  # the status filter the action applies to (set on the form)
    noun: str  # one row, e.g. "failed receipt"
    verb: str  # the button, e.g. "Release"
    done: str  # the summary, e.g. "Released"
    title: str  # the list's title
    list_url: str  # URL names
    url: str
    detail_url: str
    run: Callable[..., Any]  # fn(rows, *, actor, user, reason) -> idemdash.core.bulk.BulkResult
    audit_action: str  # what `run` writes to the audit log for each row
    explain: str
    label: Callable[[Any], str]  # a row's key or event id


BULK: dict[str, BulkSpec] = {
    "receipts": BulkSpec(
        form=ReceiptFilter, rows=lambda f: f.receipts(), status="failed", noun="failed receipt",
        verb="Release", done="Released", title="Receipts", list_url="dashboard:receipts",
        url="dashboard:receipts_bulk", detail_url="dashboard:receipt", run=store.release_many,
        audit_action="receipt.release",
        explain="Each key is given back, one by one, so that its caller's next attempt runs the "
                "operation again; each keeps its error and gets its own audit entry.",
        label=lambda r: r.key,
    ),
    "events": BulkSpec(
        form=EventFilter, rows=lambda f: f.events(), status="dead", noun="dead event",
        verb="Reprocess", done="Reprocessed", title="Webhook events", list_url="dashboard:events",
        url="dashboard:events_bulk", detail_url="dashboard:event", run=processing.reprocess_many,
        audit_action="webhook_event.reprocess",
        explain="Each event gets a fresh attempt budget and is handed to a worker now; each gets "
                "its own audit entry. Handlers run again, so they must be idempotent.",
        label=lambda e: e.provider_event_id or e.dedupe_key,
    ),
    "outbox": BulkSpec(
        form=OutboxFilter, rows=lambda f: f.messages(), status="dead", noun="dead message",
        verb="Send again", done="Sent again", title="Outbox", list_url="dashboard:outbox",
        url="dashboard:outbox_bulk", detail_url="dashboard:message", run=outbox_store.send_again_many,
        audit_action="outbox_message.send_again",
        explain="Each message gets a fresh set of attempts and is due now, so the next drain "
                "sends it; each gets its own audit entry. Its key goes downstream unchanged.",
        label=lambda m: m.key,
    ),
}

# Parameters of the confirmation form that are not filters.
NOT_FILTERS = ("csrfmiddlewaretoken", "reason", "expected", "after", "sort")


def describe_filter(form: forms.Form, skip: tuple[str, ...] = ("sort",)) -> list[tuple[str, str]]:
    """A valid filter form's values as the form shows them: (label, value) pairs, choices by
    their label and times with their zone, never field names like `since` or `q`."""
    described = []
    for name, field in form.fields.items():
        value = form.cleaned_data.get(name)
        if name in skip or value in (None, ""):
            continue
        if isinstance(field, forms.ChoiceField):
            value = dict(field.choices).get(value, value)
        elif isinstance(value, datetime):
            value = timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")
        described.append((str(form[name].label), str(value)))
    return described


def _params(request: HttpRequest, spec: BulkSpec) -> QueryDict:
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
    spec = BULK[kind]
    params = _params(request, spec)
    form = spec.form(params)
    back = f"{reverse(spec.list_url)}?{params.urlencode()}"
    context: dict[str, Any] = {
        "form": form, "spec": spec, "back": back, "action_url": reverse(spec.url), "limit": store.BULK_LIMIT,
    }
    if not form.is_valid():
        return render(request, "dashboard/bulk_flow.html", context, status=400)
    targets = spec.rows(form)
    context["filters"] = describe_filter(form)
    matched = targets.count()
    if request.method == "POST":
        if not request.user.has_perm(OPERATE):
            raise PermissionDenied("Only operators may act.")
        actor = request.user.get_username()
        first = _last_audit_id()
        result = spec.run(
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
        "first_rows": [(spec.label(row), reverse(spec.detail_url, args=[row.pk])) for row in first_rows],
        "hidden": list(params.items()),
    })
    return render(request, "dashboard/bulk_flow.html", context)
