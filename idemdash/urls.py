from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/openapi.json", include("receipts.openapi")),
    path("api/v1/idempotency", include("receipts.advertise")),
    path("api/v1/receipts/", include("receipts.urls")),
    path("api/v1/outbox", include("receipts.outbox.urls")),
    path("webhooks/", include("webhooks.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(template_name="idemdash/login.html", redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("idemdash.dashboard.urls")),
]

handler403 = "idemdash.errors.permission_denied"
handler404 = "idemdash.errors.page_not_found"
handler500 = "idemdash.errors.server_error"
