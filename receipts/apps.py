from importlib import import_module
from typing import Any

from django.apps import AppConfig, apps


class ReceiptsConfig(AppConfig):
    name = "receipts"
    verbose_name = "Idempotency receipts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from receipts import checks  # noqa: F401  (registers the system checks)


def declared_by_apps(module: str, attribute: str) -> list[Any]:
    """The `attribute` lists of every installed app's `module` (`retention.PURGERS`,
    `rollup.ROLLUPS`), joined in INSTALLED_APPS order: other apps register their work
    there, so this app never imports them."""
    found: list[Any] = []
    for config in apps.get_app_configs():
        try:
            declared = import_module(f"{config.name}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.{module}":
                raise
            continue
        found.extend(getattr(declared, attribute, []))
    return found
