"""System checks (`manage.py check`, run by runserver and migrate): the health settings are
read at every overview load and every minute's schedule, so a bad value fails here, once,
instead of there. `check --deploy` adds the mail check."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, reverse

from idemdash.core import tracing
from idemdash.dashboard import alerts, health
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


@register()
def default_alerts_to(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """Before migrate installs the default rules with it, so that no rule is left half made."""
    to = setting("IDEMDASH_DEFAULT_ALERTS_TO")
    try:
        if to:
            validate_email(to)
    except ValidationError:
        return [Error(f"IDEMDASH_DEFAULT_ALERTS_TO is not an email address: {to!r}.",
                      hint="Give the address the default alert rules email, or empty for none (docs/dashboard.md, Alerts).",
                      id="idemdash.E031")]
    return []


@register(Tags.urls)
def urls_it_links_to(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    """The project's URLs every dashboard page needs: a missing one would make each page a 500
    (NoReverseMatch), so it is said once here, with the line that adds it."""
    needed = {"LOGIN_URL": lambda: resolve_url(settings.LOGIN_URL), "logout": lambda: reverse("logout")}
    if apps.is_installed("webhooks"):  # the events page links to the admin's endpoints
        needed["admin:webhooks_webhookendpoint_changelist"] = lambda: reverse("admin:webhooks_webhookendpoint_changelist")
    missing = []
    for name, find in needed.items():
        try:
            find()
        except NoReverseMatch:
            missing.append(name)
    if not missing:
        return []
    return [Error(
        f"The dashboard links to URLs the project's URLconf cannot reverse: {', '.join(missing)}.",
        hint='Add path("accounts/", include("django.contrib.auth.urls")) and path("admin/", admin.site.urls) to '
             "your urls.py, or the dashboard's own login (docs/host-project.md, The dashboard).",
        id="idemdash.E030",
    )]


@register("mail", deploy=True)  # Tags.mail's value; Django 5.2 has no Tags.mail
def mail_delivered(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    """A deployment whose mail goes to a development backend prints its email alerts instead of
    sending them. A warning on every Django version, where Django 6.1's own check (mail.E001,
    which idemdash's settings silence in favour of this one) is an error: idemdash needs no mail
    when its alerts post to a webhook."""
    undelivered = alerts.undelivered_mail()
    if not undelivered:
        return []
    return [Warning(
        f"{undelivered}: email alerts and email.send messages are not delivered.",
        hint="Set EMAIL_URL, e.g. submission://user:password@smtp.example.com (docs/operations.md, Email); "
             "alert rules that post to a webhook need no mail.",
        id="idemdash.W030",
    )]
