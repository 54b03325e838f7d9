"""Pausing and resuming from the dashboard: sending of an outbox action or destination host
(receipts/outbox/pauses.py), processing of a webhook endpoint (webhooks/endpoints.py).

GET /paused/ shows every pause with its backlog (viewers); the outbox and events pages and
the overview show the same panel or a line of it. Each POST (operators; CSRF like every form)
calls the domain function, which writes the one audit entry: pausing what is paused, or
resuming what is not, changes nothing and says so. Under htmx the panel is swapped in
place; otherwise the browser goes back to the page it came from."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from idemdash.dashboard import queries
from idemdash.dashboard.access import operator_required, viewer_required
from idemdash.dashboard.views.pages import partial_or_page, safe_next
from receipts.outbox import pauses
from webhooks import endpoints
from webhooks.models import WebhookEndpoint

# Which part of the panel a page shows (`?show=`): the outbox's pauses, the endpoints, or both.
PARTS = ("outbox", "endpoints")


def _panel(request: HttpRequest, status: int = 200) -> HttpResponse:
    show = request.GET.get("show") or request.POST.get("show") or ""
    context = {"paused": queries.paused_work(), "show": show if show in PARTS else "", "next": safe_next(request, "")}
    if request.user.has_perm("idemdash_dashboard.operate"):  # what the pause form suggests
        context["targets"] = [*pauses.known_targets(pauses.Kind.HOST), *pauses.known_targets(pauses.Kind.ACTION)]
    return partial_or_page(request, "dashboard/paused.html", "dashboard/partials/pause_panel.html", context, status)


def _done(request: HttpRequest, status: int = 200) -> HttpResponse:
    if request.htmx:
        return _panel(request, status)
    return redirect(safe_next(request, reverse("dashboard:paused")))


@require_GET
@viewer_required
def paused(request: HttpRequest) -> HttpResponse:
    return _panel(request)


def _outbox(request: HttpRequest, run: Callable[..., bool], done: str, unchanged: str, refused: str) -> HttpResponse:
    """Pause or resume (`run`) what the form names, and say what happened: `done` or
    `unchanged` formatted with its name, `refused` before why the input is refused."""
    kind, target = request.POST.get("kind", ""), request.POST.get("target", "")
    try:
        changed = run(kind, target, actor=request.user.get_username(), user=request.user,
                      note=request.POST.get("note", ""))
    except pauses.InvalidPause as exc:
        messages.error(request, f"{refused} {exc}")
        return _done(request, 400)
    kind, target = pauses.normalise(kind, target)
    name = f"{pauses.Kind(kind).label} {target}"
    if changed:
        messages.success(request, done.format(name=name))
    else:
        messages.info(request, unchanged.format(name=name))
    return _done(request)


@require_POST
@operator_required
def outbox_pause(request: HttpRequest) -> HttpResponse:
    return _outbox(request, pauses.pause,
                   "Paused sending for {name}: its messages are kept and wait until you resume.",
                   "Sending for {name} was paused already: nothing changed.", "Not paused:")


@require_POST
@operator_required
def outbox_resume(request: HttpRequest) -> HttpResponse:
    return _outbox(request, pauses.resume, "Resumed sending for {name}: the worker is sending what waited.",
                   "Sending for {name} was not paused: nothing changed.", "Not resumed:")


@require_POST
@operator_required
def endpoint_pause(request: HttpRequest, pk: int) -> HttpResponse:
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
    if endpoints.pause(endpoint, actor=request.user.get_username(), user=request.user, note=request.POST.get("note", "")):
        messages.success(request, f"Paused endpoint {endpoint.slug}: deliveries are still stored and answered 2xx, "
                                  "and wait, with the events already waiting, until you resume.")
    else:
        messages.info(request, f"Endpoint {endpoint.slug} was paused already: nothing changed.")
    return _done(request)


@require_POST
@operator_required
def endpoint_resume(request: HttpRequest, pk: int) -> HttpResponse:
    endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
    released = endpoints.resume(endpoint, actor=request.user.get_username(), user=request.user,
                                note=request.POST.get("note", ""))
    if released is None:
        messages.info(request, f"Endpoint {endpoint.slug} was not paused: nothing changed.")
    else:
        messages.success(request, f"Resumed endpoint {endpoint.slug}: {released} held event(s) handed to workers.")
    return _done(request)
