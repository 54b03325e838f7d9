"""The figures for machines: `/api/v1/stats` (JSON) and `/metrics` (Prometheus), for a
viewer's session or an API bearer token."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from idemdash.dashboard import queries
from idemdash.dashboard.metrics import CONTENT_TYPE, exposition
from idemdash.dashboard.access import VIEW
from idemdash.core.clients import client_for_request, refused
from idemdash.core.jsonapi import read_only
from idemdash.core.problems import problem


def _machine_access(view: Callable[[HttpRequest], HttpResponse]) -> Callable[[HttpRequest], HttpResponse]:
    """A viewer's session or an API bearer token; otherwise a problem."""
    @wraps(view)
    def checked(request: HttpRequest) -> HttpResponse:
        if request.user.is_authenticated:
            if request.user.has_perm(VIEW):
                return view(request)
            return problem(403, "forbidden", "Forbidden", "This account may not see the dashboard's figures.")
        if client_for_request(request) is not None:
            return view(request)
        return refused(request, "Authentication required", "Log in, or send Authorization: Bearer <API token>.")

    return checked


@read_only("GET")
@_machine_access
def api_stats(request: HttpRequest) -> HttpResponse:
    try:
        window = queries.parse_window(request.GET.get("window"))
    except queries.BadWindow as exc:
        return problem(400, "bad-window", "Unknown window", str(exc))
    return JsonResponse(queries.overview_stats(window))


@require_GET
@_machine_access
def metrics(request: HttpRequest) -> HttpResponse:
    """The figures for Prometheus (idemdash/dashboard/metrics.py)."""
    return HttpResponse(exposition(), content_type=CONTENT_TYPE)
