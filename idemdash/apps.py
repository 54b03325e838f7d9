from typing import Any

from django.apps import AppConfig
from django.apps import apps as global_apps
from django.db import DEFAULT_DB_ALIAS
from django.db.models.signals import post_migrate


def _ensure_groups(sender: AppConfig, **kwargs: Any) -> None:
    from idemdash.access import ensure_groups

    ensure_groups()


def _install_schedules(sender: AppConfig, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    # django-q2 keeps its schedules in the default database. A partial migrate may have
    # left its tables out; the next full one installs them.
    try:
        kwargs.get("apps", global_apps).get_model("django_q", "Schedule")
    except LookupError:
        return
    if using != DEFAULT_DB_ALIAS:
        return
    from idemdash.scheduling import install_schedules

    install_schedules()


class IdemdashConfig(AppConfig):
    name = "idemdash"
    verbose_name = "idemdash"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # After migrate and after a test flush, so the groups always exist.
        post_migrate.connect(_ensure_groups, sender=self)
        # And so do the schedules of every app's periodic work (each app's schedules.py):
        # a deployment that migrates and starts the worker runs them with no other step.
        post_migrate.connect(_install_schedules, sender=self)
