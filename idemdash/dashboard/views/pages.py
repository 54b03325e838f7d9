"""What every dashboard page shares: the full page or, under htmx, only its partial; the
filtered list with keyset pages (receipts, events, rejected deliveries, outbox); the latest
rows of a detail page's log; and where to go back to after an action."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django import forms
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from idemdash.core.leases import is_stuck
from idemdash.core.masking import masked
from idemdash.dashboard import queries
from idemdash.dashboard.forms import BadCursor, keyset_page


def safe_next(request: HttpRequest, fallback: str) -> str:
    """The page to go back to (`next`), if it is on this site; otherwise `fallback`."""
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return fallback


def query_without(request: HttpRequest, name: str) -> str:
    """The page's query string without `name`: the filters a table refreshes itself with."""
    query = request.GET.copy()
    query.pop(name, None)
    return query.urlencode()


def pretty_json(value: Any) -> str:
    """JSON as a page shows it: secrets masked by kind (idemdash.core.masking)."""
    return json.dumps(masked(value), indent=2, sort_keys=True, ensure_ascii=False)


def newest_first_page(request: HttpRequest, rows: QuerySet, context: dict[str, Any], size: int = 50) -> None:
    """One page of `rows`, newest first by id, older pages by `?before=<id>`. Sets `rows`,
    `next_page` (the query of the older page), `paged`, and `query` (the filters the table
    refreshes itself with, partials/list_poll.html) in `context`."""
    rows = rows.order_by("-pk")
    before = request.GET.get("before", "")
    if before.isdigit():
        rows = rows.filter(pk__lt=int(before))
    page = list(rows[: size + 1])
    context["rows"] = page[:size]
    if len(page) > size:
        query = request.GET.copy()
        query["before"] = page[size - 1].pk
        context["next_page"] = query.urlencode()
    context["paged"] = before.isdigit()
    context["query"] = query_without(request, "before")


def newest_first_list(request: HttpRequest, form: Any, page: str, partial: str,
                      decorate: Callable[[list], None] | None = None) -> HttpResponse:
    """A filter form's rows (`form.rows()`) a `newest_first_page` at a time: the alert
    history and the incident list."""
    context: dict[str, Any] = {"form": form, "rows": []}
    if not form.is_valid():
        return partial_or_page(request, page, partial, context, status=400)
    newest_first_page(request, form.rows(), context)
    if decorate:
        decorate(context["rows"])
    return partial_or_page(request, page, partial, context)


# A retry storm can leave thousands of rows in one unit's log: its page shows the latest ones.
LOG_LIMIT = 300


def lease_state(unit: Any, owned: str, live: tuple[str, ...]) -> dict[str, Any]:
    """What a summary says of a leased unit (event, message): `stuck` in its owned status past
    its lease, and `live` (not final: the page polls its summary and log until the outcome lands)."""
    now = timezone.now()
    return {"now": now, "stuck": is_stuck(unit, owned, now), "live": unit.status in live}


# Operator actions after which a unit's attempts are numbered from #1 again (a fresh budget).
RESTART_NUMBERING = ("webhook_event.reprocess", "outbox_message.send_again")


def with_operator_marks(rows: list, total: int, audit: list, at: str = "created_at") -> list:
    """A unit's attempt log (`rows`, oldest first, the latest of `total`) with the operator's
    actions on the unit (its audit entries) between the attempts, by time: the mark says who
    did what, and where attempt numbering starts again. A log cut to its latest rows gets
    only the marks from its first row on."""
    since = getattr(rows[0], at) if rows and total > len(rows) else None
    marks = [e for e in audit if since is None or e.created_at >= since]
    for e in marks:
        e.operator_mark = True
        e.restarts_numbering = e.action in RESTART_NUMBERING
    # Stable: an attempt and a mark at the same instant keep the attempt first.
    return sorted([*rows, *marks], key=lambda row: row.created_at if getattr(row, "operator_mark", False) else getattr(row, at))


def detail_page(
    request: HttpRequest, template: str, summary: Callable[[Any], tuple[str, dict[str, Any]]], unit: Any,
    *, attempts: list, attempt_total: int, at: str = "created_at", **shown: Any,
) -> HttpResponse:
    """A unit's page: what its summary partial shows, what the page adds, its attempts with
    the operator's actions marked between them, and its audit entries."""
    _, context = summary(unit)
    audit = queries.audit_of(unit)
    return render(request, template, {
        **context, **shown, "audit": audit, "attempt_total": attempt_total,
        "attempts": with_operator_marks(attempts, attempt_total, audit, at), **queries.causation(unit),
    })


def partial_or_page(request: HttpRequest, page: str, partial: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    template = partial if request.htmx and not request.htmx.boosted else page
    return render(request, template, context, status=status)


def filtered_list(
    request: HttpRequest,
    form: Any,
    page: str,
    partial: str,
    decorate: Callable[[list], None] | None = None,
) -> HttpResponse:
    """A filter form's rows, a keyset page at a time, with the total the filter matches
    (`queries.list_total`). Once the form is valid, `form.rows()` gives the queryset and
    `form.ordering()` the field it is ordered by and whether descending (idemdash/dashboard/forms.py);
    `decorate(page)` may add to the page's
    rows what they show beside their own fields (one query for the page). The page's filter
    form (templates/dashboard/list_page.html) swaps the table partial in place by its id,
    the partial's file name with dashes (`receipt_table.html` is `#receipt-table`)."""
    context: dict[str, Any] = {
        "form": form, "rows": [], "next_cursor": None, "table": partial,
        "table_id": partial.rpartition("/")[2].removesuffix(".html").replace("_", "-"),
    }
    status = 200
    if form.is_valid():
        queryset, (field, descending) = form.rows(), form.ordering()
        try:
            context["rows"], context["next_cursor"] = keyset_page(queryset, field, descending, request.GET.get("after"))
            context["total"] = queries.list_total(queryset)
            if decorate and context["rows"]:
                decorate(context["rows"])
        except BadCursor as exc:
            context["error"] = str(exc)
            status = 400
        context["filtered"] = form.is_filtered()
        context["paged"] = bool(request.GET.get("after"))
        context["query"] = query_without(request, "after")
        context["status_filter"] = form.cleaned_data.get("status")
    else:
        status = 400
    return partial_or_page(request, page, partial, context, status)


def describe_filter(form: forms.Form) -> list[tuple[str, str]]:
    """A valid filter form's values but its order (`sort`) as the form shows them: (label,
    value) pairs, choices by their label and times with their zone, never field names."""
    described = []
    for name, field in form.fields.items():
        value = form.cleaned_data.get(name)
        if name == "sort" or value in (None, ""):
            continue
        if isinstance(field, forms.ChoiceField):
            value = dict(field.choices).get(value, value)
        elif isinstance(value, datetime):
            value = timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")
        described.append((str(form[name].label), str(value)))
    return described
