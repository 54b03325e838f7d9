"""The demo's URLconf: the project's, and the demo shop's refund route that nothing protects
(idemdash/devtools/shop.py)."""

from django.urls import include, path

from idemdash.devtools import shop
from idemdash.urls import handler403, handler404, handler500  # noqa: F401 -- Django reads them from the root URLconf

urlpatterns = [
    path("demo/shop/refunds/", shop.refund, name="demo-shop-refund"),
    path("", include("idemdash.urls")),
]
