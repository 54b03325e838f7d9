from django.apps import AppConfig


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Idempotency receipts"
    default_auto_field = "django.db.models.BigAutoField"
