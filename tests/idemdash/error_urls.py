"""The project's URLs and error handlers, plus views that fail, for test_errors.py."""

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import path

from idemdash.urls import handler403, handler404, handler500  # noqa: F401
from idemdash.urls import urlpatterns as project


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


def forbidden(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied


urlpatterns = [
    path("boom/", boom),
    path("api/v1/boom", boom),
    path("webhooks/boom/x/", boom),
    path("api/v1/forbidden", forbidden),
    path("forbidden/", forbidden),
    *project,
]
