"""receipts/checks.py. Operation policies: a TTL of 0, a negative one or one of the wrong type
fails `manage.py check` (receipts.E006); None (permanent) passes. The database check: MySQL/MariaDB under REPEATABLE READ is refused
(receipts.E003). The outbox in a host project (receipts/checks.py:outbox_installed and the guard in
receipts/outbox/models.py): host projects with `receipts` and without `receipts.outbox`
are told the INSTALLED_APPS entry, at start-up when they show they use the outbox and at
the import of `enqueue`; a host with the entry docs/outbox.md gives enqueues and drains.

Each host is a real project in its own process (the app registry is per process), on
SQLite, with this environment's packages."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.db import connection

from receipts.checks import (
    idempotent_on_dispatch,
    migrations_that_no_longer_exist,
    mysql_atomic_requests,
    mysql_read_committed,
    operation_policies,
)

REPO = Path(__file__).resolve().parents[2]
FIX = 'add "receipts.outbox" to INSTALLED_APPS'


def outbox_entry() -> str:
    """The code block docs/outbox.md marks `<!-- guide:outbox -->`."""
    found = re.search(r"<!-- guide:outbox -->\n```python\n(.*?)```", (REPO / "docs" / "outbox.md").read_text(), re.S)
    assert found
    return found.group(1)


def make_host(root: Path, *, extra_settings: str = "", outbox_actions: bool = False) -> Path:
    project = root / "hostproject"
    for package in ("host", "shop"):
        (project / package).mkdir(parents=True)
        (project / package / "__init__.py").write_text("")
    (project / "host" / "settings.py").write_text(textwrap.dedent(f"""\
        SECRET_KEY = "host-project-outbox-test-key"
        DEBUG = False
        USE_TZ = True
        ROOT_URLCONF = "host.urls"
        INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "idemdash.core", "receipts", "shop"]
        DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{root / 'host.sqlite3'}"}}}}
        EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
        EMAIL_FILE_PATH = "{root / 'mail'}"
        """) + extra_settings)
    (project / "host" / "urls.py").write_text("urlpatterns = []\n")
    if outbox_actions:
        # A host's own action, the way docs/outbox.md says to write one.
        (project / "shop" / "outbox_actions.py").write_text(textwrap.dedent("""\
            from receipts.outbox.actions import outbox_action


            @outbox_action("shop.notify")
            def notify(payload, ctx):
                pass
            """))
    return project


def manage(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(project.parent), "PYTHONDONTWRITEBYTECODE": "1",
           "DJANGO_SETTINGS_MODULE": "host.settings", "PYTHONPATH": os.pathsep.join([str(project), str(REPO)])}
    return subprocess.run([sys.executable, "-m", "django", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_a_host_without_the_outbox_and_no_use_of_it_checks_clean(tmp_path):
    done = manage(make_host(tmp_path), "check")
    assert done.returncode == 0 and "no issues" in done.stdout, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("sign,host", [
    ("shop.outbox_actions", {"outbox_actions": True}),
    ("OUTBOX_MAX_ATTEMPTS", {"extra_settings": "OUTBOX_MAX_ATTEMPTS = 3\n"}),
])
def test_a_host_that_uses_the_outbox_without_its_app_fails_its_check_with_the_fix(tmp_path, sign, host):
    project = make_host(tmp_path, **host)
    for command in ("check", "migrate"):
        done = manage(project, command)
        assert done.returncode == 1
        assert "receipts.E002" in done.stderr and sign in done.stderr
        assert 'Add "receipts.outbox" to INSTALLED_APPS' in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("ttl", ["0", "-60", "'3600'", "3600.5", "True", "timedelta(hours=1)"])
def test_a_host_whose_operation_ttl_is_not_a_positive_number_of_seconds_fails_its_check(tmp_path, ttl):
    project = make_host(tmp_path, extra_settings=(
        "from datetime import timedelta\n"
        f"RECEIPTS_OPERATIONS = {{'email.welcome': {{'ttl_seconds': None}}, 'report.*': {{'ttl_seconds': {ttl}}}}}\n"
    ))
    done = manage(project, "check")
    assert done.returncode == 1
    assert "receipts.E006" in done.stderr and "RECEIPTS_OPERATIONS['report.*']['ttl_seconds']" in done.stderr
    assert "email.welcome" not in done.stderr.split("HINT")[0]  # None, the permanent receipt, is fine


def test_a_permanent_operation_and_a_window_long_ttl_pass_the_check(settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}, "report.weekly": {"ttl_seconds": 8 * 86400}}
    assert operation_policies() == []


@pytest.mark.parametrize("rules,says", [
    ({"x.*": {"lease_seconds": 0}}, "['lease_seconds'] must be a positive"),
    ({"x.*": {"on_failure": "explode"}}, "['on_failure'] must be 'retry' or 'burn'"),
    ({"x.*": 3600}, "must be a dict"),
    (["x.*"], "RECEIPTS_OPERATIONS must be a dict"),
])
def test_every_kind_of_bad_policy_is_one_error_that_names_it(settings, rules, says):
    settings.RECEIPTS_OPERATIONS = rules
    (error,) = operation_policies()
    assert error.id == "receipts.E006" and says in error.msg


@pytest.mark.slow
def test_enqueue_without_the_outbox_app_raises_an_error_that_names_the_entry(tmp_path):
    project = make_host(tmp_path)
    assert manage(project, "migrate", "--noinput").returncode == 0
    done = manage(project, "shell", "--no-imports", "-c", "from receipts.outbox.store import enqueue")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured:") and FIX in last
    # Django answers an unknown command itself; the check above is what says the fix.
    assert "Unknown command: 'drain_outbox'" in manage(project, "drain_outbox").stderr


@pytest.mark.slow
def test_a_host_with_the_documented_entry_enqueues_and_drains(tmp_path):
    project = make_host(tmp_path, extra_settings=outbox_entry(), outbox_actions=True)
    migrated = manage(project, "migrate", "--noinput")
    assert migrated.returncode == 0, migrated.stderr
    assert "outbox" in manage(project, "showmigrations", "outbox").stdout
    enqueued = manage(project, "shell", "--no-imports", "-c", (
        "from receipts.outbox.store import enqueue; "
        "print(enqueue('email.send', {'to': 'a@example.com', 'subject': 'Paid', 'body': 'Thanks'}, key='order-1-paid').created, "
        "enqueue('shop.notify', {}, key='order-1-notify').created)"
    ))
    assert enqueued.returncode == 0, enqueued.stderr
    assert enqueued.stdout.split() == ["True", "True"]
    drained = manage(project, "drain_outbox")
    assert drained.returncode == 0, drained.stderr
    assert "claimed=2 sent=2" in drained.stdout
    assert len(list((tmp_path / "mail").iterdir())) == 1


# --- receipts.E003: MySQL/MariaDB's isolation level ---------------------------------------


def _as_mysql(monkeypatch: pytest.MonkeyPatch, options: dict) -> None:
    # The check reads only the settings, so a settings dict that says MySQL is enough.
    monkeypatch.setitem(connection.settings_dict, "ENGINE", "django.db.backends.mysql")
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)


def test_mysql_under_repeatable_read_is_refused(monkeypatch):
    _as_mysql(monkeypatch, {"isolation_level": "repeatable read"})
    errors = mysql_read_committed(databases=["default"])
    assert [e.id for e in errors] == ["receipts.E003"] and "REPEATABLE READ" in errors[0].msg


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


# --- receipts.E001 and E005: the routed views' dispatch -------------------------------------


def test_settings_without_a_urlconf_route_no_view_and_check_clean(settings):
    """A worker's settings (tests/receipts/celery_host: a Celery worker checks them at start-up)
    may have no ROOT_URLCONF at all."""
    del settings.ROOT_URLCONF
    assert idempotent_on_dispatch() == []


# --- receipts.E004: ATOMIC_REQUESTS on MySQL/MariaDB ----------------------------------------


@pytest.mark.parametrize("engine, atomic, refused", [
    ("django.db.backends.mysql", True, True),
    ("django.db.backends.mysql", False, False),
    ("django.db.backends.postgresql", True, False),
    ("django.db.backends.sqlite3", True, False),
])
def test_atomic_requests_is_refused_on_mysql_only(monkeypatch, engine, atomic, refused):
    from django.conf import settings

    # The check reads only the settings; the dict is put back after the test.
    monkeypatch.setitem(settings.DATABASES["default"], "ENGINE", engine)
    monkeypatch.setitem(settings.DATABASES["default"], "ATOMIC_REQUESTS", atomic)
    errors = mysql_atomic_requests()
    assert [e.id for e in errors] == (["receipts.E004"] if refused else [])


@pytest.mark.parametrize(("rule", "message"), [
    ({"after_crash": "later"}, "must be 'rerun' or 'hold'"),
    ({"on_failure": "explode"}, "must be 'retry' or 'burn'"),
    ({"after_crash": "hold", "reconcile": "tests.receipts.no_such_module.reconcile"}, "reconcile"),
    ({"after_crash": "hold", "reconcile": "receipts.store.NOT_DONE"}, "not a function"),
])
@pytest.mark.django_db
def test_manage_py_check_refuses_an_operation_policy_it_cannot_apply(settings, rule, message):
    settings.RECEIPTS_OPERATIONS = {"email.send": {"lease_seconds": 60}, "x.*": rule}
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with pytest.raises(SystemCheckError, match=r"receipts\.E006") as caught:
        call_command("check")
    assert message in str(caught.value) and "RECEIPTS_OPERATIONS['x.*']" in str(caught.value)


def test_manage_py_check_accepts_a_held_operation_with_its_reconcile(settings):
    settings.RECEIPTS_OPERATIONS = {"email.*": {"after_crash": "hold", "reconcile": "tests.receipts.test_store.reconcile_found"}}
    from receipts.checks import operation_policies

    assert operation_policies() == []


@pytest.mark.parametrize(("rule", "says"), [
    ({"compact_after_seconds": 0}, "must be a positive whole number of seconds"),
    ({"compact_after_seconds": "3600"}, "must be a positive whole number of seconds"),
    ({"compact_after_seconds": 3600.5}, "must be a positive whole number of seconds"),
    ({"ttl_seconds": 3600, "compact_after_seconds": 3600}, "not shorter than the operation's TTL of 3600"),
    # The default TTL (24 h) applies when the entry names none; a financial name gets 7 days.
    ({"compact_after_seconds": 2 * 86400}, "not shorter than the operation's TTL of 86400"),
])
def test_a_compaction_window_that_is_not_shorter_than_the_ttl_is_one_e017_error(settings, rule, says):
    settings.RECEIPTS_OPERATIONS = {"x.*": rule, "email.send": {"lease_seconds": 60}}
    (error,) = operation_policies()  # said once: the window is E017's, not E006's too
    assert error.id == "receipts.E017" and says in error.msg and "RECEIPTS_OPERATIONS['x.*']" in error.msg


def test_a_window_inside_the_ttl_a_financial_one_and_a_permanent_operation_pass(settings):
    settings.RECEIPTS_OPERATIONS = {
        "export.*": {"ttl_seconds": 7 * 86400, "compact_after_seconds": 86400},
        "payment.*": {"compact_after_seconds": 2 * 86400},  # financial: 7 days by default
        "email.welcome": {"ttl_seconds": None, "compact_after_seconds": 30 * 86400},
    }
    assert operation_policies() == []


@pytest.mark.django_db
def test_manage_py_check_refuses_a_compaction_window_as_long_as_the_ttl(settings):
    settings.RECEIPTS_OPERATIONS = {"report.*": {"ttl_seconds": 3600, "compact_after_seconds": 7200}}
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError

    with pytest.raises(SystemCheckError, match=r"receipts\.E017") as caught:
        call_command("check")
    assert "compact_after_seconds" in str(caught.value) and "receipts.E006" not in str(caught.value)


@pytest.mark.django_db
def test_a_database_migrated_by_a_chain_that_no_longer_exists_fails_the_check_once():
    from django.db.migrations.recorder import MigrationRecorder

    assert migrations_that_no_longer_exist(databases=["default"]) == []
    # What a database migrated before the squash holds: 0001_initial, which exists again, and
    # the rest of the old chain, which does not.
    MigrationRecorder(connection).record_applied("receipts", "0019_archived_compacted_at")
    MigrationRecorder(connection).record_applied("django_q", "0099_not_ours")  # another app's: not our business
    (error,) = migrations_that_no_longer_exist(databases=["default"])
    assert error.id == "receipts.E018" and "receipts.0019_archived_compacted_at" in error.msg
    assert "django_q" not in error.msg and "drop and recreate" in error.hint

