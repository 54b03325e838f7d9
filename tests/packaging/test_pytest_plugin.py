"""The pytest plugin from a host project: idemdash's wheel installed into a fresh virtual
environment with pytest and pytest-django, nothing else; a throwaway host whose step, view,
pytest.ini, settings and tests are docs/testing.md's blocks as written. Its own pytest run
finds the plugin through the entry point and passes: run twice, from threads and processes
at once, killed right after its effect. A broken step (it charges on every call) makes the
host's test fail, saying so. SQLite (the host's test database in a file, as the page says);
with DATABASE_URL on PostgreSQL, PostgreSQL too, where the plugin closes the LISTEN
connection of waiting callers before pytest-django drops the host's test database."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.packaging.host import Database, host_env, host_settings, marked_blocks, new_venv, run
from tests.qcluster import database_url

pytestmark = [pytest.mark.slow, pytest.mark.packaging, pytest.mark.timeout(600)]

BLOCKS = marked_blocks("testing.md", "testing")

# Callers that wait in the test's own process for a slow first attempt: on PostgreSQL they
# open the LISTEN connection, which the plugin must close before the test database is dropped.
WAITING_TEST = '''\
import time

import pytest

import receipts


@pytest.mark.django_db(transaction=True)
def test_callers_waiting_for_a_slow_first_attempt_get_its_result(idempotency):
    def charge() -> dict:
        time.sleep(0.5)
        return idempotency.provider(idempotency_key=receipts.current().downstream_key)

    idempotency.assert_runs_once_concurrently(lambda: receipts.run_once("slow", "payment.charge", charge), threads=3)
'''

BROKEN_TEST = '''\
from host import payments


def charge_every_time(order_id: int) -> dict:
    return payments.create_charge(order_id, idempotency_key=None)  # no claim, no key


def test_a_step_without_a_claim_charges_twice(idempotency, monkeypatch):
    monkeypatch.setattr(payments, "create_charge", idempotency.provider)
    idempotency.assert_runs_once(lambda: charge_every_time(42), times=2)
'''


@pytest.fixture(scope="module")
def venv(wheel, client_wheel, tmp_path_factory) -> Path:
    """The wheel (the core, no extras, beside the client's it depends on) with pytest and
    pytest-django, as the page says."""
    venv = new_venv(tmp_path_factory.mktemp("plugin-venv") / "venv")
    run(venv / "bin" / "pip", "install", str(client_wheel), str(wheel), "pytest", "pytest-django", timeout=300)
    if database_url().startswith("postgres"):
        run(venv / "bin" / "pip", "install", "psycopg[binary]>=3.2,<4", timeout=300)
    return venv


def make_host(root: Path, database: Database) -> Path:
    project = root / "hostproject"
    (project / "host").mkdir(parents=True)
    (project / "tests").mkdir()
    for name, language in [("pytest_ini", "ini"), ("settings", "python"), ("step", "python"), ("tests", "python"),
                           ("held", "python")]:
        assert BLOCKS[name][0] == language, name
    (project / "pytest.ini").write_text(BLOCKS["pytest_ini"][1])
    settings = host_settings(f"DATABASES = {{'default': {database.django!r}}}")
    if database.django["ENGINE"].endswith("sqlite3"):  # the page's block is for SQLite
        settings += "\n# --- from docs/testing.md: settings ---\n" + BLOCKS["settings"][1]
    (project / "host" / "__init__.py").write_text("")
    (project / "host" / "settings.py").write_text(settings)
    (project / "host" / "payments.py").write_text(BLOCKS["step"][1])
    (project / "host" / "urls.py").write_text(
        "from django.urls import path\n\nfrom host import payments\n\n"
        'urlpatterns = [path("charge", payments.charge_view)]\n'
    )
    (project / "tests" / "test_payments.py").write_text(BLOCKS["tests"][1])
    (project / "tests" / "test_held.py").write_text(BLOCKS["held"][1])
    return project


def host_pytest(venv: Path, project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-p", "no:cacheprovider", "-v", *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=300,
    )


def test_a_host_projects_own_tests_use_the_plugins_fixtures_and_helpers(venv, tmp_path, database):
    project = make_host(tmp_path, database)
    env = host_env(tmp_path)
    plugins = run(venv / "bin" / "python", "-c",
                  "from importlib.metadata import entry_points; print(sorted(e.value for e in entry_points(group='pytest11')))")
    assert "receipts.pytest_plugin" in plugins

    (project / "tests" / "test_waiting.py").write_text(WAITING_TEST)
    passed = host_pytest(venv, project, env, "tests/test_payments.py", "tests/test_waiting.py", "tests/test_held.py")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    for name in ("test_charging_an_order_twice_charges_it_once", "test_posting_a_charge_twice_with_one_key_charges_once",
                 "test_charging_from_threads_and_processes_at_once_charges_once",
                 "test_a_charge_killed_after_the_provider_charged_is_retried_with_the_same_key"):
        assert f"tests/test_payments.py::{name} PASSED" in passed.stdout, passed.stdout
    assert "tests/test_waiting.py::test_callers_waiting_for_a_slow_first_attempt_get_its_result PASSED" in passed.stdout
    assert ("tests/test_held.py::test_a_held_charge_killed_after_the_provider_charged_waits_for_an_operator PASSED"
            in passed.stdout)
    assert "6 passed" in passed.stdout
    # Not "is being accessed by other users": the plugin closed the LISTEN connection first.
    assert "Error when trying to teardown test databases" not in passed.stdout, passed.stdout

    (project / "tests" / "test_broken.py").write_text(BROKEN_TEST)
    failed = host_pytest(venv, project, env, "tests/test_broken.py")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "called 2 times in a row: 2 effects, not 1" in failed.stdout
    assert "1 failed" in failed.stdout
