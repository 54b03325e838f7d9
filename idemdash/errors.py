"""Error answers that look like the product. Under /api/ and /webhooks/ every error is
application/problem+json, including paths no URL pattern matches (a client parses the
answer; an HTML page would be a surprise); everywhere else idemdash's own pages
(templates/idemdash/, named so that a host project mounting the dashboard keeps its own).

Named in idemdash/urls.py as handler403/404/500.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views import defaults

from idemdash.core.problems import problem

API_PREFIX = "/api/"
WEBHOOKS_PREFIX = "/webhooks/"


def _for_clients(request: HttpRequest) -> bool:
    return request.path_info.startswith((API_PREFIX, WEBHOOKS_PREFIX))


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _for_clients(request):
        return problem(403, "forbidden", "Forbidden", "This account may not do this.")
    return defaults.permission_denied(request, exception, template_name="idemdash/403.html")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path_info.startswith(WEBHOOKS_PREFIX):
        # Any path here that names no endpoint, a malformed slug included.
        return problem(404, "webhook-endpoint-not-found", "Unknown webhook endpoint",
                       "No webhook endpoint at this path.")
    if request.path_info.startswith(API_PREFIX):
        return problem(404, "not-found", "Not found", "No API resource at this path.")
    return defaults.page_not_found(request, exception, template_name="idemdash/404.html")


def server_error(request: HttpRequest) -> HttpResponse:
    """Reads neither the database nor the session: the failure may be theirs. Django's own
    server_error renders 500.html without a request context, so no user, no navigation."""
    if _for_clients(request):
        return problem(500, "internal-error", "Internal server error", "The server failed; the error is logged.")
    return defaults.server_error(request, template_name="idemdash/500.html")
