"""What the installed apps declare, found by module name, so the core never imports them."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from django.apps import apps


def declared_by_apps(module: str, attribute: str) -> list[Any]:
    """The `attribute` lists of every installed app's `module` (`retention.PURGERS`,
    `rollup.ROLLUPS`), joined in INSTALLED_APPS order: each app registers its work there,
    so the code that runs it never imports the app."""
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
