from django.urls import path

from webhooks import views

app_name = "webhooks"
urlpatterns = [
    path("<slug:slug>/", views.receive, name="receive"),
    # Without the slash too: APPEND_SLASH would answer a POST with a 301, which clients
    # follow as a GET without the body, so the delivery would be lost.
    path("<slug:slug>", views.receive, name="receive_without_slash"),
]
