"""The dashboard's system checks (idemdash/dashboard/checks.py) for OpenTelemetry: a setting
turned on without the packages it needs fails `manage.py check` (idemdash.E020, E021)
instead of exporting nothing in silence. The health settings' check (idemdash.E001) is
tests/dashboard/test_health.py's."""

from __future__ import annotations

import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from idemdash.core import tracing


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
