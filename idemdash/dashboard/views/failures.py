"""Failures grouped by cause (idemdash/core/failures.py): the groups still failing first, each
with its count, first and last seen, where it happens and its latest error; operators
acknowledge or resolve a group (POST, CSRF, audited once). A group resolves by itself once
it has been quiet for failures.QUIET, and reopens with its next failure."""

from __future__ import annotations

from django.contrib import messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from idemdash.core import failures
from idemdash.core.failures import FailureGroup
from idemdash.dashboard.access import operator_required, viewer_required
from idemdash.dashboard.views.pages import partial_or_page
from receipts.outbox.models import OutboxMessage
from webhooks.models import WebhookEvent

State = FailureGroup.State
# ?state=: the groups shown; "unresolved" (the default) is open and acknowledged together.
SHOWN = {"unresolved": [State.OPEN, State.ACKNOWLEDGED], "open": [State.OPEN], "acknowledged": [State.ACKNOWLEDGED],
         "resolved": [State.RESOLVED], "all": list(State)}
LIMIT = 200
# Per kind of unit: its page, its list, its model, and the status its bulk repair is for.
UNITS = {
    "event": ("dashboard:event", "dashboard:events", WebhookEvent, WebhookEvent.Status.DEAD),
    "message": ("dashboard:message", "dashboard:outbox", OutboxMessage, OutboxMessage.Status.DEAD),
}


@require_GET
@viewer_required
def failure_groups(request: HttpRequest) -> HttpResponse:
    shown = request.GET.get("state", "unresolved")
    if shown not in SHOWN:
        shown = "unresolved"
    groups = FailureGroup.objects.filter(state__in=SHOWN[shown]).order_by("-last_seen", "-pk")
    rows = list(groups[:LIMIT])
    _with_units(rows)
    return partial_or_page(request, "dashboard/failures.html", "dashboard/partials/failure_table.html", {
        "groups": rows, "total": groups.count(), "shown": shown, "choices": list(SHOWN),
        "quiet_seconds": int(failures.QUIET.total_seconds()),
    })


def _with_units(groups: list[FailureGroup]) -> None:
    """Each group with the units whose last failure is in it now, by status, each linked to
    its list filtered to the group (whose dead ones that list's bulk action repairs)."""
    for kind, (page, listing, model, _) in UNITS.items():
        mine = [g for g in groups if g.kind == kind]
        counts = (model.objects.filter(failure_signature__in=[g.signature for g in mine])
                  .values_list("failure_signature", "status").annotate(n=Count("pk")))
        by_group: dict[str, list] = {}
        for signature, status, n in counts:
            by_group.setdefault(signature, []).append((status, n, f"{reverse(listing)}?group={signature}&status={status}"))
        for group in mine:
            group.sample_url = reverse(page, args=[group.sample_id])
            group.units = sorted(by_group.get(group.signature, []))


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
