"""Search by business id (`/search/?q=`) and the trace of one id (`/trace/?q=`): the
domain is idemdash/dashboard/search.py; these parse the box, call it and pick a template."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from idemdash.dashboard import search as finder
from idemdash.dashboard.access import viewer_required
from idemdash.dashboard.views.pages import partial_or_page


def _answer(request: HttpRequest, name: str, partial: str, find: Callable[[finder.Term], dict[str, Any]]) -> HttpResponse:
    """The page `name` for the id in `?q=`: what `find` says of it, nothing yet for an empty
    box, or (400) why the text cannot be an id."""
    context: dict[str, Any] = {"max_length": finder.MAX_LENGTH, "limit": finder.LIMIT, "trace_limit": finder.TRACE_LIMIT}
    status = 200
    try:
        term = finder.parse(request.GET.get("q", ""))
    except finder.BadQuery as exc:
        context["error"] = str(exc)
        status = 400
    else:
        context["q"] = term.text if term else ""
        if term is not None:
            context.update(find(term))
    return partial_or_page(request, f"dashboard/{name}.html", f"dashboard/partials/{partial}.html", context, status)


@require_GET
@viewer_required
def search(request: HttpRequest) -> HttpResponse:
    return _answer(request, "search", "search_results", lambda term: {"results": finder.search(term)})


@require_GET
@viewer_required
def trace(request: HttpRequest) -> HttpResponse:
    return _answer(request, "trace", "trace_timeline", lambda term: {"trace": finder.trace(term)})
