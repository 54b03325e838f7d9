from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/receipts/", include("receipts.urls")),
    path("api/v1/outbox", include("receipts.outbox.urls")),
    path("webhooks/", include("webhooks.urls")),
]
