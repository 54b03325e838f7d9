"""The dashboard's system checks (idemdash/dashboard/checks.py): OpenTelemetry turned on without
the packages it needs (idemdash.E020, E021) and URLs its pages link to that the project lacks
(idemdash.E030) fail `manage.py check` instead of failing in silence or on every page. The
health settings' check (idemdash.E001) is tests/dashboard/test_health.py's."""

from __future__ import annotations

import sys
import types
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from idemdash.core import tracing

# The model checks ask the database's features (SQLite's JSON support): a connection, which
# a worker that runs this file first would not have made yet.
pytestmark = pytest.mark.django_db


def check() -> None:
    call_command("check", stdout=StringIO(), stderr=StringIO())


def test_otel_on_without_the_sdk_fails_the_check(settings, monkeypatch):
    settings.IDEMDASH_OTEL = True
    check()  # the dev extra has the SDK: nothing to say
    # The SDK uninstalled: its import fails as it would.
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    with pytest.raises(SystemCheckError) as exc:
        check()
    assert "idemdash.E020" in str(exc.value) and "idemdash[otel]" in str(exc.value)


def test_otel_metrics_on_without_the_api_fails_the_check(settings, monkeypatch):
    settings.IDEMDASH_OTEL_METRICS = True
    check()
    monkeypatch.setattr(tracing, "trace", None)  # what tracing.py's guarded import leaves
    with pytest.raises(SystemCheckError) as exc:
        check()
    assert "idemdash.E021" in str(exc.value)


def test_both_off_need_nothing(settings, monkeypatch):
    monkeypatch.setattr(tracing, "trace", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)
    check()


def _urlconf(monkeypatch, settings, *patterns) -> None:
    module = types.ModuleType("host_urls_for_the_check")
    module.urlpatterns = list(patterns)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    settings.ROOT_URLCONF = module.__name__


def test_a_project_without_a_logout_url_fails_the_check_once_naming_it(settings, monkeypatch, client):
    from django.contrib import admin
    from django.contrib.auth import views as auth_views
    from django.urls import include, path

    _urlconf(monkeypatch, settings, path("ops/", include("idemdash.dashboard.urls")), path("admin/", admin.site.urls),
             path("login/", auth_views.LoginView.as_view(), name="login"))
    settings.LOGIN_URL = "login"
    with pytest.raises(SystemCheckError) as refused:
        check()
    assert "idemdash.E030" in str(refused.value) and "cannot reverse: logout." in str(refused.value)
    assert "django.contrib.auth.urls" in str(refused.value)


def test_a_login_url_name_that_does_not_reverse_and_no_admin_fail_the_check(settings, monkeypatch):
    from django.urls import include, path

    _urlconf(monkeypatch, settings, path("ops/", include("idemdash.dashboard.urls")),
             path("accounts/", include("django.contrib.auth.urls")))
    settings.LOGIN_URL = "signin"
    with pytest.raises(SystemCheckError) as refused:
        check()
    assert "cannot reverse: LOGIN_URL, admin:webhooks_webhookendpoint_changelist." in str(refused.value)


def test_idemdash_own_urls_pass_the_check():
    check()  # idemdash's own URLconf: every page's links reverse


def test_an_address_for_the_default_alert_rules_that_is_no_address_fails_the_check(settings):
    settings.IDEMDASH_DEFAULT_ALERTS_TO = "ops at example"
    with pytest.raises(SystemCheckError, match="idemdash.E031.*IDEMDASH_DEFAULT_ALERTS_TO is not an email address"):
        check()
    settings.IDEMDASH_DEFAULT_ALERTS_TO = "ops@example.com"
    check()
