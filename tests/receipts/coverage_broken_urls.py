"""A URLconf with an include whose module cannot be imported (tests/receipts/test_coverage.py)."""

from django.urls import URLResolver, path
from django.urls.resolvers import RoutePattern

from tests.receipts.coverage_urls import refund

urlpatterns = [
    # Named by string, the included URLconf is imported when its patterns are first read.
    URLResolver(RoutePattern("broken/"), "tests.receipts.no_such_urls"),
    path("refund/<int:pk>/", refund),
]
