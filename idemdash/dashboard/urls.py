from django.urls import path

from idemdash.dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("receipts/", views.receipts, name="receipts"),
    path("receipts/bulk-retry/", views.bulk_retry, name="bulk_retry"),
    path("receipts/<int:pk>/", views.receipt_detail, name="receipt"),
    path("receipts/<int:pk>/retry/", views.receipt_action, {"action": "retry"}, name="receipt_retry"),
    path("receipts/<int:pk>/release/", views.receipt_action, {"action": "release"}, name="receipt_release"),
    path("stuck/", views.stuck, name="stuck"),
    path("audit/", views.audit_log, name="audit"),
    path("api/v1/stats", views.api_stats, name="api_stats"),
    path("metrics", views.metrics, name="metrics"),
]
