"""URLconf of tests/receipts/asgi_settings.py: the view kinds, then the project."""

from django.urls import include, path

from tests.receipts import view_kinds_urls

urlpatterns = [*view_kinds_urls.urlpatterns, path("", include("idemdash.urls"))]
