import importlib.util

from django.urls import include, path

from idemdash.devtools.bench import views

urlpatterns = [
    path("bench/insert/bare/", views.insert_bare, name="bench-insert-bare"),
    path("bench/insert/protected/", views.insert_protected, name="bench-insert-protected"),
    path("bench/insert/floor/", views.insert_floor, name="bench-insert-floor"),
    path("bench/replay/ceiling/", views.replay_ceiling, name="bench-replay-ceiling"),
]
if importlib.util.find_spec("rest_framework") is not None:
    from idemdash.devtools.bench import drf_views

    urlpatterns += [
        path("bench/drf/unprotected/", drf_views.unprotected),
        path("bench/drf/idemdash/", drf_views.under_idemdash),
    ]
    if drf_views.under_drf_idempotency is not None:
        urlpatterns.append(path("bench/drf/drf-idempotency/", drf_views.under_drf_idempotency))
urlpatterns.append(path("", include("idemdash.urls")))
