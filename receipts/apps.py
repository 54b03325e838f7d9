from __future__ import annotations

from typing import Any

from django.apps import AppConfig, apps
from django.db import DEFAULT_DB_ALIAS
from django.db.models.signals import post_migrate

from idemdash.core.appconfig import BigIntegerIds


def _install_schedules(sender: AppConfig, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    # django-q2 keeps its schedules in the default database. A partial migrate may have
    # left its tables out, and a host without django-q2 (the core install) has none: the
    # next full migrate with django-q2 installs them.
    try:
        kwargs.get("apps", apps).get_model("django_q", "Schedule")
    except LookupError:
        return
    if using != DEFAULT_DB_ALIAS:
        return
    from idemdash.core.schedules import install_schedules

    install_schedules()


class ReceiptsConfig(BigIntegerIds, AppConfig):
    name = "receipts"
    verbose_name = "Idempotency receipts"

    def ready(self) -> None:
        from receipts import checks  # noqa: F401  (registers the system checks)

        # Every app's periodic work (its schedules.py) is installed by every migrate (and
        # after a test flush), so a deployment that migrates and starts the worker runs it
        # with no other step. The base app hosts it, as every other app requires it.
        post_migrate.connect(_install_schedules, sender=self, dispatch_uid="receipts-install-schedules")
