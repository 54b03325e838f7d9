from django.urls import path

from receipts import api

app_name = "receipts"
urlpatterns = [
    path("", api.receipt_detail, name="detail"),
    path("claim", api.claim, name="claim"),
    path("complete", api.complete, name="complete"),
    path("fail", api.fail, name="fail"),
    path("heartbeat", api.heartbeat, name="heartbeat"),
]
