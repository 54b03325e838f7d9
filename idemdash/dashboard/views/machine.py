"""The figures for machines: `/api/v1/stats` (JSON) and `/metrics` (Prometheus), for a
viewer's session or an API bearer token."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from idemdash.dashboard import queries
from idemdash.dashboard.metrics import CONTENT_TYPE, exposition
from idemdash.dashboard.access import VIEW
from idemdash.core.clients import client_for_request, refused
from idemdash.core.jsonapi import read_only
from idemdash.core.problems import problem

def _machine_access(request: HttpRequest) -> HttpResponse | None:
    """A viewer's session or an API bearer token; otherwise a problem."""
    if request.user.is_authenticated:
        if request.user.has_perm(VIEW):
            return None
        return problem(403, "forbidden", "Forbidden", "This account may not see the dashboard's figures.")
    if client_for_request(request) is not None:
        return None
    return refused(request, "Authentication required", "Log in, or send Authorization: Bearer <API token>.")


@read_only("GET")
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
    """The figures for Prometheus (idemdash/dashboard/metrics.py)."""
    denied = _machine_access(request)
    if denied:
        return denied
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
