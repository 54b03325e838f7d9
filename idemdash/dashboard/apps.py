from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate

from idemdash.core.appconfig import BigIntegerIds


def _ensure_groups(sender: AppConfig, **kwargs: Any) -> None:
    from idemdash.dashboard.access import ensure_groups

    ensure_groups()


def _install_default_alert_rules(sender: AppConfig, using: str = "default", apps: Any = None, **kwargs: Any) -> None:
    # After a test's flush too, like the groups; a host's second database gets none, nor does a
    # migrate that stopped short of the rules' and the audit log's tables (`migrate auth`).
    try:
        for label, model in (("idemdash_dashboard", "AlertRule"), ("idemdash_core", "AuditEntry")):
            (apps or sender.apps).get_model(label, model)
    except LookupError:
        return
    if using == "default":
        from idemdash.dashboard.alerts import install_default_rules

        install_default_rules()


def _create_cache_tables(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    # The throttles' shared cache is a database table when no Redis is set (settings.py,
    # CACHES["throttle"]): made here so that `migrate` is the one deployment step. It does
    # nothing for other cache backends, or when the table exists.
    from django.core.management import call_command

    call_command("createcachetable", database=using, verbosity=0)


def _start_opentelemetry() -> None:
    """The SDK's providers (IDEMDASH_OTEL) and the metrics' instruments (IDEMDASH_OTEL_METRICS),
    in every process that loads the app: web, worker and commands. Without the packages the
    settings ask for, nothing starts here and `idemdash.E020`/`E021` say why."""
    from idemdash.core import tracing
    from idemdash.dashboard.conf import setting

    if setting("IDEMDASH_OTEL"):
        tracing.configure(metrics=setting("IDEMDASH_OTEL_METRICS"))
    if setting("IDEMDASH_OTEL_METRICS") and tracing.trace is not None:
        from idemdash.dashboard import otel_metrics

        otel_metrics.register()


class IdemdashConfig(BigIntegerIds, AppConfig):
    name = "idemdash.dashboard"
    # The package's path, as the core's and the worker's labels are: a host's own
    # `dashboard` app cannot clash with it.
    label = "idemdash_dashboard"
    verbose_name = "Alerts and incidents"

    def ready(self) -> None:
        # After migrate and after a test flush, so the groups always exist.
        post_migrate.connect(_ensure_groups, sender=self)
        post_migrate.connect(_create_cache_tables, sender=self)
        post_migrate.connect(_install_default_alert_rules, sender=self)
        from idemdash.dashboard import checks  # noqa: F401  (registers the system checks)

        _start_opentelemetry()
