from django.urls import path

from webhooks import views

app_name = "webhooks"
urlpatterns = [
    path("<slug:slug>/", views.receive, name="receive"),
]
