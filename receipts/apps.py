from __future__ import annotations

from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.management import CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.recorder import MigrationRecorder
from django.db.models.signals import post_migrate, pre_migrate

from idemdash.core.appconfig import BigIntegerIds


def _install_schedules(sender: AppConfig, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    # django-q2's schedules are in the default database, once its tables are (if installed).
    try:
        kwargs.get("apps", apps).get_model("django_q", "Schedule")
    except LookupError:
        return
    if using != DEFAULT_DB_ALIAS:
        return
    from idemdash.core.schedules import install_schedules

    install_schedules()


def _refuse_a_database_of_other_users(sender: AppConfig, using: str = DEFAULT_DB_ALIAS, **kwargs: Any) -> None:
    """Stop `migrate` before it writes anything when the user model's app is migrated but its
    table is missing (a custom user model, migrated by settings that name another): the first
    foreign key to it would fail halfway through."""
    connection = connections[using]
    recorder = MigrationRecorder(connection)
    if not recorder.has_table():
        return
    user_model = apps.get_model(settings.AUTH_USER_MODEL)
    label = user_model._meta.app_label
    if not any(app == label for app, _ in recorder.applied_migrations()):
        return
    table = user_model._meta.db_table
    if table in connection.introspection.table_names():
        return
    raise CommandError(
        f"The migrations of {label!r} are applied in this database, but the user model's table "
        f"{table!r} is not there: its users are another model's (a custom AUTH_USER_MODEL). "
        f"Set AUTH_USER_MODEL to that model (idemdash's own settings: IDEMDASH_AUTH_USER_MODEL and "
        f"IDEMDASH_HOST_APPS, docs/host-project.md) and migrate again; nothing was migrated."
    )


class ReceiptsConfig(BigIntegerIds, AppConfig):
    name = "receipts"
    verbose_name = "Idempotency receipts"

    def ready(self) -> None:
        from receipts import checks  # noqa: F401  (registers the system checks)

        # Every migrate installs every app's schedules, so a deployment needs no other step.
        pre_migrate.connect(_refuse_a_database_of_other_users, sender=self, dispatch_uid="receipts-user-table")
        post_migrate.connect(_install_schedules, sender=self, dispatch_uid="receipts-install-schedules")
