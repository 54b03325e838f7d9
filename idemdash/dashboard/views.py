"""The dashboard: thin function views. Reads come from idemdash.dashboard.queries, every action goes
through the receipt store, which writes the audit log."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from idemdash.dashboard import alerts, charts, conflicts, queries
from idemdash.dashboard.access import VIEW, operator_required, viewer_required
from idemdash.dashboard.actions import ObjectAction, run_object_action
from idemdash.dashboard.bulk import describe_filter
from idemdash.dashboard.forms import AuditFilter, ReceiptFilter
from idemdash.dashboard.templatetags.idemdash_tags import audit_verb
from idemdash.dashboard.pages import filtered_list, latest, partial_or_page
from receipts import store
from receipts.conf import policy_for
from receipts.auth import client_for_request
from receipts.models import Attempt, AuditEntry, Receipt
from receipts.problems import problem

Status = Receipt.Status

OVERVIEW_WINDOW_KEY = "overview_window"


def _overview_context(window: queries.Window) -> dict[str, Any]:
    now = timezone.now()
    series = queries.receipt_series(window, now)
    flow = queries.flow_series(window, now)
    return {
        "window": window,
        "windows": list(queries.WINDOWS),
        "stats": queries.overview_stats(window, now),
        "now": now,
        "charts": [
            ("chart-traffic", charts.traffic_chart(series, window.name)),
            ("chart-duplicates", charts.duplicate_rate_chart(series, window.name)),
            ("chart-conflicts", charts.conflicts_chart(series, window.name)),
            ("chart-stuck", charts.stuck_chart(series, flow, window.name)),
            ("chart-webhooks", charts.webhook_chart(flow, window.name)),
            ("chart-outbox", charts.outbox_chart(flow, window.name)),
        ],
        "with_charts": True,
        "alert_panel": alerts.overview_alerts(window, now),
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


# --- receipts -------------------------------------------------------------------------------------


@require_GET
@viewer_required
def receipts(request: HttpRequest) -> HttpResponse:
    form = ReceiptFilter(request.GET)
    return filtered_list(request, form, lambda: (form.receipts(), *form.sort_key()), "dashboard/receipts.html",
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


# A retry storm can leave thousands of 409s on one key; the page shows the latest ones.
TIMELINE_LIMIT = 300
CONFLICT_LIMIT = 20


def _policy(operation: str) -> dict[str, Any]:
    policy = policy_for(operation)
    return {**policy.as_dict(), "source": policy.matched()}


def _detail_context(receipt: Receipt) -> dict[str, Any]:
    attempts = Attempt.objects.filter(receipt=receipt)
    timeline, timeline_total = latest(attempts, "-created_at", "-id", limit=TIMELINE_LIMIT)
    rejected, mismatch_total = latest(
        attempts.filter(outcome=Attempt.Outcome.MISMATCH), "-created_at", "-id", limit=CONFLICT_LIMIT
    )
    mismatches = [
        {"attempt": a, "differences": conflicts.diff_requests(receipt.request, a.request),
         "pretty": _pretty(a.request)}
        for a in rejected
    ]
    return {
        "receipt": receipt,
        # From today's settings: the policy a claim of this operation gets now.
        "policy": _policy(receipt.operation),
        "timeline": timeline,
        "timeline_total": timeline_total,
        "mismatch_total": mismatch_total,
        "mismatches": mismatches,
        "request_pretty": _pretty(receipt.request),
        "response_pretty": _pretty(receipt.response_body),
        "lease_expired": bool(receipt.lease_expires_at and receipt.lease_expires_at < timezone.now()),
        # Not final: the page polls its summary and timeline until the outcome lands.
        "live": receipt.released or receipt.status == Status.PROCESSING,
        "audit": queries.audit_of(receipt),
    }


@require_GET
@viewer_required
def receipt_detail(request: HttpRequest, pk: int) -> HttpResponse:
    receipt = get_object_or_404(Receipt, pk=pk)
    return render(request, "dashboard/receipt_detail.html", _detail_context(receipt))


def _release(receipt: Receipt, *, actor: str, user: Any, reason: str) -> None:
    store.release(receipt, actor=actor, user=user, reason=reason)


def _release_caution(receipt: Receipt) -> str:
    if receipt.status != Status.PROCESSING:
        return ""
    text = ("It is processing: its lease is revoked and its fencing token bumped, so the worker "
            "holding it can no longer store a result.")
    if receipt.lease_expires_at and receipt.lease_expires_at > timezone.now():
        text += " Its lease has not expired: a worker may still be running it. Its result will be refused."
    return text


RECEIPT_ACTIONS = {
    "release": ObjectAction(
        name="release",
        verb="Release",
        explain="The key is given back: the caller's next attempt with this key runs the operation "
                "again (even for an operation that burns its key on failure). Your reason goes to the "
                "audit log and to the release marker; a failed receipt keeps the error it failed with.",
        applies_to=(Status.FAILED, Status.PROCESSING),
        run=_release,
        refused=(store.StaleToken, store.NotReleasable),
        done="Released {label}: the caller's next attempt will run.",
        caution=_release_caution,
    ),
}


def _receipt_summary(receipt: Receipt) -> tuple[str, dict[str, Any]]:
    return "dashboard/partials/receipt_summary.html", _detail_context(receipt)


@require_http_methods(["GET", "POST"])
@operator_required
def receipt_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    receipt = get_object_or_404(Receipt, pk=pk)
    return run_object_action(
        request, receipt, RECEIPT_ACTIONS[action], label=receipt.key,
        url_name="dashboard:receipt_release", detail_url=reverse("dashboard:receipt", args=[pk]),
        summary=_receipt_summary,
    )


@require_GET
@viewer_required
def stuck(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    rows = list(queries.stuck_receipts(now)[:500])
    events = list(queries.stuck_events(now).select_related("endpoint")[:500])
    outbox = list(queries.stuck_messages(now)[:500])
    return render(request, "dashboard/stuck.html", {
        "receipts": rows, "now": now, "total": queries.stuck_receipts(now).count(),
        "events": events, "events_total": queries.stuck_events(now).count(),
        "messages_stuck": outbox, "messages_total": queries.stuck_messages(now).count(),
    })


@require_GET
@viewer_required
def audit_log(request: HttpRequest) -> HttpResponse:
    form = AuditFilter(request.GET)
    if not form.is_valid():
        return render(request, "dashboard/audit.html", {"form": form, "entries": []}, status=400)
    entries = form.entries(AuditEntry.objects.select_related("user").order_by("-id"))
    before = request.GET.get("before", "")
    if before.isdigit():
        entries = entries.filter(id__lt=int(before))
    rows = list(entries[:51])
    more = len(rows) > 50
    rows = rows[:50]
    queries.name_audit_subjects(rows)
    query = request.GET.copy()
    query.pop("before", None)
    return render(request, "dashboard/audit.html", {
        "form": form, "entries": rows, "next_before": rows[-1].pk if more else None, "paged": bool(before),
        # The action by its verb, as the rows name it.
        "filters": [(label, audit_verb(value) if label == form.fields["action"].label else value)
                    for label, value in describe_filter(form)],
        "query": query.urlencode(),
    })


# --- machine-readable figures --------------------------------------------------------------------


def _machine_access(request: HttpRequest) -> HttpResponse | None:
    """A viewer's session or an API bearer token; otherwise a problem."""
    if request.user.is_authenticated:
        if request.user.has_perm(VIEW):
            return None
        return problem(403, "forbidden", "Forbidden", "This account may not see the dashboard's figures.")
    if client_for_request(request) is not None:
        return None
    return problem(401, "unauthorized", "Authentication required",
                   "Log in, or send Authorization: Bearer <API token>.",
                   headers={"WWW-Authenticate": 'Bearer realm="idemdash"'})


@require_GET
def api_stats(request: HttpRequest) -> HttpResponse:
    denied = _machine_access(request)
    if denied:
        return denied
    try:
        window = queries.parse_window(request.GET.get("window"))
    except queries.BadWindow as exc:
        return problem(400, "bad-window", "Unknown window", str(exc))
    return JsonResponse(queries.overview_stats(window))


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Every figure of every window as a Prometheus gauge labelled with its window."""
    denied = _machine_access(request)
    if denied:
        return denied
    now = timezone.now()
    documents = [queries.overview_stats(w, now) for w in queries.WINDOWS.values()]
    lines: list[str] = []
    for block, fields in queries.FIELD_DOCS.items():
        for field, help_text in fields.items():
            name = f"idemdash_{block}_{field}"
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} gauge")
            for doc in documents:
                lines.append(f'{name}{{window="{doc["window"]}"}} {doc[block][field]}')
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4; charset=utf-8")
