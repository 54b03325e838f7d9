"""receipts/checks.py: the database check (the URL checks are tested with the view kinds,
tests/receipts/test_view_kinds.py)."""

from __future__ import annotations

import pytest
from django.db import connection

from receipts.checks import mysql_read_committed


def _as_mysql(monkeypatch: pytest.MonkeyPatch, options: dict) -> None:
    # The check reads only the settings, so a settings dict that says MySQL is enough.
    monkeypatch.setitem(connection.settings_dict, "ENGINE", "django.db.backends.mysql")
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)


def test_mysql_under_repeatable_read_is_refused(monkeypatch):
    _as_mysql(monkeypatch, {"isolation_level": "repeatable read"})
    errors = mysql_read_committed(databases=["default"])
    assert [e.id for e in errors] == ["receipts.E002"] and "REPEATABLE READ" in errors[0].msg


@pytest.mark.parametrize("options", [{}, {"isolation_level": "read committed"}])
def test_mysql_under_read_committed_passes(monkeypatch, options):
    _as_mysql(monkeypatch, options)
    assert mysql_read_committed(databases=["default"]) == []


def test_another_database_passes_whatever_its_options(monkeypatch):
    monkeypatch.setitem(connection.settings_dict, "ENGINE", "django.db.backends.postgresql")
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {"isolation_level": "repeatable read"})
    assert mysql_read_committed(databases=["default"]) == []


def test_a_check_run_without_databases_passes(monkeypatch):
    _as_mysql(monkeypatch, {"isolation_level": "repeatable read"})
    assert mysql_read_committed(databases=None) == []
