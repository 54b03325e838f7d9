from django.urls import include, path

from idemdash.devtools.soak import views

urlpatterns = [
    path("soak/two-commits/", views.two_commits),
    path("soak/one-commit/", views.one_commit),
    path("", include("idemdash.urls")),
]
