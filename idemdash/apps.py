from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _ensure_groups(sender: AppConfig, **kwargs: Any) -> None:
    from idemdash.access import ensure_groups

    ensure_groups()


class IdemdashConfig(AppConfig):
    name = "idemdash"
    verbose_name = "idemdash"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # After migrate and after a test flush, so the groups always exist.
        post_migrate.connect(_ensure_groups, sender=self)
