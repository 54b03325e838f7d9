from django.urls import path

from receipts.outbox import api

app_name = "outbox"
urlpatterns = [
    path("", api.enqueue, name="enqueue"),
]
