"""One shape for every operator action on one row (release a receipt, reprocess an event,
send a message now or again, release a stuck row): GET shows the confirmation, POST calls
the domain function, which writes the audit entry, and the page's summary is swapped in
place under htmx or the browser is sent back without it, with a message that says in plain
words what was done.

It serves receipts, webhook events and outbox messages alike: each action's domain function
has the signature fn(obj, *, actor, user, reason) and raises one of `refused` when the row's
state does not allow it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme


@dataclass(frozen=True)
class ObjectAction:
    name: str  # URL name suffix and form field, e.g. "reprocess"
    verb: str
    explain: str
    applies_to: tuple[str, ...]  # statuses the button is offered for
    run: Callable[..., Any]  # domain function: run(obj, actor=, user=, reason=)
    refused: tuple[type[Exception], ...]  # what the domain function raises when it does not apply
    # What was done, for the message after it: formatted with the row's `label` and its
    # `status` after the action, e.g. "Released {label}: the caller's next attempt will run."
    done: str = "{verb} {label}: it is {status} now."
    danger: bool = False
    # A warning about this row to show on the confirmation ("" for none), e.g. a live lease.
    caution: Callable[[Any], str] | None = None


def shown_status(obj: Any) -> str:
    """The status an operator reads (a released receipt reads "released")."""
    return getattr(obj, "shown_status", obj.status)


def safe_next(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return fallback


def run_object_action(
    request: HttpRequest,
    obj: Any,
    spec: ObjectAction,
    *,
    label: str,
    url_name: str,
    detail_url: str,
    summary: Callable[[Any], tuple[str, dict[str, Any]]],
) -> HttpResponse:
    """`summary(obj)` gives the summary partial and its context, rendered after an htmx POST
    (the new status appears in place) and used as the confirmation's page around it."""
    action_url = reverse(url_name, args=[obj.pk])
    template, context = summary(obj)
    context.update({
        "obj": obj, "label": label, "spec": spec, "action_url": action_url, "detail_url": detail_url,
        "next": safe_next(request, ""), "inline": bool(request.htmx), "now": timezone.now(),
        "target": f"#{obj._meta.model_name}-summary", "state": shown_status(obj),
        "caution": spec.caution(obj) if spec.caution else "",
    })
    if request.method == "GET":
        if request.htmx:
            return render(request, "dashboard/partials/object_confirm.html", context)
        # Without htmx (e.g. from the Stuck board) the confirmation sits in the row's whole
        # summary, so the operator sees what they act on.
        return render(request, "dashboard/object_confirm.html", {**context, "summary": template, "confirming": True})

    status = 200
    reason = request.POST.get("reason", "").strip()[:500] or f"{spec.verb.lower()} from the dashboard"
    try:
        spec.run(obj, actor=request.user.get_username(), user=request.user, reason=reason)
    except spec.refused as exc:
        obj.refresh_from_db()
        messages.error(request, f"Not done: {exc} It is {shown_status(obj)} now.")
        status = 409
    else:
        obj.refresh_from_db()
        messages.success(request, spec.done.format(verb=spec.verb, label=label, status=shown_status(obj)))
    if request.htmx:
        template, summary_context = summary(obj)
        return render(request, template, summary_context, status=status)
    return redirect(safe_next(request, detail_url))
