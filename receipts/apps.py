from django.apps import AppConfig

# Moved to idemdash.core.discovery; kept for one release.
from idemdash.core.discovery import declared_by_apps  # noqa: F401


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Idempotency receipts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from receipts import checks  # noqa: F401  (registers the system checks)
