"""The Content-Security-Policy on the pages, not on the APIs' answers. The policy itself and
the middleware that writes it (Django 6's own, else django-csp's) are chosen in
idemdash/settings.py (`CSP_DIRECTIVES`, `CSP_MIDDLEWARE`); this runs that middleware for
every path but /api/ and /webhooks/.

Why not everywhere: a JSON or problem+json answer runs no script and draws no style, so the
header says nothing there, and building it is not free on the hot paths (django-csp: about
36 µs a request, a twentieth of a replay; Django 6's: 8 µs).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.module_loading import import_string

from idemdash.errors import API_PREFIX, WEBHOOKS_PREFIX

UNPOLICED = (API_PREFIX, WEBHOOKS_PREFIX)


class PagesPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.with_policy = import_string(settings.CSP_MIDDLEWARE)(get_response)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(UNPOLICED):
            return self.get_response(request)
        return self.with_policy(request)
