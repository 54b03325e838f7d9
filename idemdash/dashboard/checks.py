"""System checks (`manage.py check`, run by runserver and migrate): the health settings are
read at every overview load and every minute's schedule, so a bad value fails here, once,
instead of there."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register

from idemdash.core import tracing
from idemdash.dashboard import health
from idemdash.dashboard.conf import setting


@register()
def health_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return [
        Error(problem, hint="See docs/dashboard.md, section Health.", id="idemdash.E001")
        for problem in health.setting_problems()
    ]


@register()
def otel_installed(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """IDEMDASH_OTEL without the SDK, or IDEMDASH_OTEL_METRICS without the API, would export
    nothing and say nothing: refused here instead."""
    hint = "pip install 'idemdash[otel]', or turn the setting off (docs/operations.md, OpenTelemetry)."
    if setting("IDEMDASH_OTEL") and not tracing.sdk_installed():
        return [Error("IDEMDASH_OTEL is on but the OpenTelemetry SDK or its OTLP/HTTP exporter is not installed.",
                      hint=hint, id="idemdash.E020")]
    if setting("IDEMDASH_OTEL_METRICS") and tracing.trace is None:
        return [Error("IDEMDASH_OTEL_METRICS is on but opentelemetry-api is not installed.", hint=hint, id="idemdash.E021")]
    return []
