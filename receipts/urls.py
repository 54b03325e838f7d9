from django.urls import path

app_name = "receipts"
urlpatterns: list = []
