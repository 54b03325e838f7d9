from django.urls import include, path

from paydesk.api import api

urlpatterns = [
    path("payments/", include("payments.urls")),
    path("api/", api.urls),
]
