from django.urls import include, path

from idemdash.devtools.soak import views

urlpatterns = [
    path("soak/effect/", views.effect),
    path("", include("idemdash.urls")),
]
