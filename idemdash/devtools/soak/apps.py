import os

from django.apps import AppConfig
from django.db.backends.signals import connection_created


def _name_the_connection(sender, connection, **kwargs) -> None:
    # Each process's backend says which process it serves (pg_stat_activity.application_name),
    # so the soak's fault thread can SIGKILL a process caught inside a transaction.
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('application_name', %s, false)", [f"soak:{os.getpid()}"])


class SoakConfig(AppConfig):
    """`make soak`'s views and webhook handler; installed only by its settings."""

    name = "idemdash.devtools.soak"
    label = "soak"

    def ready(self) -> None:
        connection_created.connect(_name_the_connection, dispatch_uid="soak-application-name")
