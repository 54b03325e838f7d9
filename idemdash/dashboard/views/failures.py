"""Failures grouped by cause (idemdash/core/failures.py): the groups still failing first, each
with its count, first and last seen, where it happens and its latest error; operators
acknowledge or resolve a group (POST, CSRF, audited once). A group resolves by itself once
it has been quiet for failures.QUIET, and reopens with its next failure."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_GET, require_POST

from idemdash.core import failures
from idemdash.core.failures import FailureGroup
from idemdash.dashboard import queries
from idemdash.dashboard.access import operator_required, viewer_required
from idemdash.dashboard.views.pages import partial_or_page

State = FailureGroup.State
# ?state=: the groups shown; "unresolved" (the default) is open and acknowledged together.
SHOWN = {"unresolved": [State.OPEN, State.ACKNOWLEDGED], "open": [State.OPEN], "acknowledged": [State.ACKNOWLEDGED],
         "resolved": [State.RESOLVED], "all": list(State)}
LIMIT = 200
@require_GET
@viewer_required
def failure_groups(request: HttpRequest) -> HttpResponse:
    shown = request.GET.get("state", "unresolved")
    if shown not in SHOWN:
        shown = "unresolved"
    groups = FailureGroup.objects.filter(state__in=SHOWN[shown]).order_by("-last_seen", "-pk")
    rows = queries.with_failing_units(list(groups[:LIMIT]))
    return partial_or_page(request, "dashboard/failures.html", "dashboard/partials/failure_table.html", {
        "groups": rows, "total": groups.count(), "shown": shown, "choices": list(SHOWN),
        "quiet_seconds": int(failures.QUIET.total_seconds()),
    })


def _set_state(request: HttpRequest, pk: int, state: str, done: str) -> HttpResponse:
    group = get_object_or_404(FailureGroup, pk=pk)
    try:
        failures.set_state(group, state, actor=request.user.get_username(), user=request.user)
    except failures.AlreadyInState as exc:  # a second click, or another operator first: nothing changes
        messages.info(request, f"Nothing done: {exc}")
    else:
        messages.success(request, done.format(group=group))
    return redirect("dashboard:failures")


@require_POST
@operator_required
def acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    return _set_state(request, pk, State.ACKNOWLEDGED, "Acknowledged {group.place}: {group.cause}.")


@require_POST
@operator_required
def resolve(request: HttpRequest, pk: int) -> HttpResponse:
    return _set_state(request, pk, State.RESOLVED, "Resolved {group.place}: {group.cause}; its next failure reopens it.")
