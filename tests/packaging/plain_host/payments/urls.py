from django.urls import path

from payments import views

app_name = "payments"
urlpatterns = [
    path("", views.payment_list, name="list"),
    path("capture/", views.capture, name="capture"),
    path("<int:pk>/refund/", views.refund, name="refund"),
    path("payouts/", views.PayoutView.as_view(), name="payouts"),
    path("status/", views.StatusView.as_view(), name="status"),
    path("charges/", views.create_charge, name="charges"),
    path("charges/<int:pk>/void/", views.void_charge, name="void"),
    path("charges/<int:pk>/", views.charge_detail, name="charge"),
]
