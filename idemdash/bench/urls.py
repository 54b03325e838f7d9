from django.urls import include, path

from idemdash.bench import views

urlpatterns = [
    path("bench/insert/bare/", views.insert_bare, name="bench-insert-bare"),
    path("bench/insert/protected/", views.insert_protected, name="bench-insert-protected"),
    path("", include("idemdash.urls")),
]
