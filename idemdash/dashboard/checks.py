"""System checks (`manage.py check`, run by runserver and migrate): the health settings are
read at every overview load and every minute's schedule, so a bad value fails here, once,
instead of there."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, register

from idemdash.dashboard import health


@register()
def health_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    return [
        Error(problem, hint="See docs/dashboard.md, section Health.", id="idemdash.E001")
        for problem in health.setting_problems()
    ]
