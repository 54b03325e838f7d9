from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from idemdash.core.appconfig import BigIntegerIds


def _ensure_env_endpoints(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    from webhooks.endpoints import ensure_env_endpoints
    from webhooks.models import WebhookSecret

    # `migrate` to an earlier migration also ends in post_migrate: only act on a full schema.
    if WebhookSecret._meta.db_table in connections[using].introspection.table_names():
        ensure_env_endpoints(using=using)


class WebhooksConfig(BigIntegerIds, AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        # Registration only: no database access here. Each installed app's
        # `webhook_handlers` module registers its handlers (the demo's live in devtools).
        autodiscover_modules("webhook_handlers")
        post_migrate.connect(_ensure_env_endpoints, sender=self, dispatch_uid="webhooks-env-endpoints")
