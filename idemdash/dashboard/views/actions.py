"""The one view for an operator action on one unit (release a receipt, reprocess an event, send
a message now or again, release a stuck row), over the registry of idemdash/core/actions.py:
GET shows the confirmation, POST calls the action's domain function, which writes the audit
entry, and the unit's summary is swapped in place under htmx or the browser is sent back
without it, with a message that says in plain words what was done. The URL names the kind
and the action (`dashboard:<kind>_<action>`, e.g. `dashboard:event_reprocess`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from idemdash.core import actions, audit
from idemdash.core.actions import shown_status
from idemdash.dashboard import queries
from idemdash.dashboard.access import operator_required
from idemdash.dashboard.views import events, outbox, receipts
from idemdash.dashboard.views.pages import safe_next
from receipts import references

# Each kind's summary partial and its context, rendered after an htmx POST (the new status
# appears in place) and used as the confirmation's page around it.
SUMMARIES: dict[str, Callable[[Any], tuple[str, dict[str, Any]]]] = {
    "receipt": receipts.summary,
    "event": events.summary,
    "message": outbox.summary,
}


@require_http_methods(["GET", "POST"])
@operator_required
def object_action(request: HttpRequest, kind: str, pk: int, action: str) -> HttpResponse:
    unit_kind = actions.kind(kind)
    spec = unit_kind.action(action)
    if spec is None:
        raise Http404("No such action.")
    obj = get_object_or_404(unit_kind.units(), pk=pk)
    label = unit_kind.label(obj)
    summary = SUMMARIES[kind]
    detail_url = reverse(f"dashboard:{kind}", args=[pk])
    action_url = reverse(f"dashboard:{kind}_{action}", args=[pk])
    template, context = summary(obj)
    context.update({
        "obj": obj, "label": label, "spec": spec, "action_url": action_url, "detail_url": detail_url,
        "next": safe_next(request, ""), "inline": bool(request.htmx), "now": timezone.now(),
        "target": f"#{obj._meta.model_name}-summary", "state": shown_status(obj),
        "caution": spec.caution(obj) if spec.caution else "", "note": spec.note(obj) if spec.note else "",
        # Will retrying help? Said before the click, whatever the action (idemdash/core/actions.py:Kind.lasting).
        "lasting": unit_kind.lasting_failure(obj),
        # What already happened because of it (receipts/references.py: side_effects_on_record).
        "side_effects": references.side_effects_on_record(obj) if request.method == "GET" else None,
    })
    if request.method == "GET":
        if request.htmx:
            return render(request, "dashboard/partials/object_confirm.html", context)
        # Without htmx (e.g. from the Stuck board) the confirmation sits in the row's whole
        # summary, so the operator sees what they act on.
        return render(request, "dashboard/object_confirm.html", {**context, "summary": template, "confirming": True})

    status = 200
    reason = audit.cut(request.POST.get("reason", "")) or f"{spec.verb.lower()} from the dashboard"
    given = {"result": request.POST.get("result", "")} if spec.input else {}
    try:
        spec.perform(obj, actor=request.user.get_username(), user=request.user, reason=reason, **given)
    except spec.refused as exc:
        obj.refresh_from_db()
        messages.error(request, f"Not done: {exc} It is {shown_status(obj)} now.")
        status = 400 if isinstance(exc, ValueError) else 409  # the value given, or the unit's state
    else:
        obj.refresh_from_db()
        messages.success(request, spec.done.format(verb=spec.verb, label=label, status=shown_status(obj)))
    if request.htmx:
        template, summary_context = summary(obj)
        response = render(request, template, summary_context, status=status)
        if status == 200:
            # The entry the action wrote, in the page's "Operator actions" card at once (the
            # card is outside the summary this swap replaces).
            response.content += render_to_string("dashboard/partials/object_audit.html", {
                "audit": queries.audit_of(obj), "audit_id": f"{obj._meta.model_name}-audit", "oob": True,
            }, request).encode()
        return response
    return redirect(safe_next(request, detail_url))
