"""idemdash/settings.py: the environment helpers (every variable goes through one of these,
so a typo in a deployment fails at start-up naming the variable instead of falling back to a
default), then the production settings themselves, loaded in a fresh interpreter with a
chosen environment (the suite itself runs tests.settings, which supplies a random key).

`idemdash.settings` is already imported by pytest-django; importing the helpers from it does
not execute the module again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

import idemdash.settings as idemdash_settings
from idemdash.settings import envbool, envint, envlist

NAME = "IDEMDASH_TEST_SETTING"


@pytest.fixture(autouse=True)
def unset(monkeypatch):
    monkeypatch.delenv(NAME, raising=False)


# --- envbool ------------------------------------------------------------------------------------


@pytest.mark.parametrize("default", [True, False])
def test_envbool_is_the_default_when_the_variable_is_unset(default):
    assert envbool(NAME, default) is default


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "On", " true "])
def test_envbool_reads_the_true_spellings(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    assert envbool(NAME, False) is True


@pytest.mark.parametrize("raw", ["0", "false", "No", "off", "", "  "])
def test_envbool_reads_the_false_spellings_and_empty_as_false(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    assert envbool(NAME, True) is False


@pytest.mark.parametrize("raw", ["2", "enabled", "y", "tru"])
def test_envbool_refuses_anything_else_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=rf"{NAME} must be a boolean .*{raw!r}"):
        envbool(NAME, True)


# --- envint -------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [None, "", "   "])
def test_envint_is_the_default_when_the_variable_is_unset_or_empty(monkeypatch, raw):
    if raw is not None:
        monkeypatch.setenv(NAME, raw)
    assert envint(NAME, 42) == 42


@pytest.mark.parametrize("raw,value", [("7", 7), (" 12 ", 12), ("0", 0), ("+3", 3)])
def test_envint_reads_an_integer(monkeypatch, raw, value):
    monkeypatch.setenv(NAME, raw)
    assert envint(NAME, 42) == value


@pytest.mark.parametrize("raw", ["1.5", "ten", "1e3", "0x10"])
def test_envint_refuses_what_is_not_an_integer_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(NAME, raw)
    with pytest.raises(ImproperlyConfigured, match=rf"{NAME} must be an integer, got {raw!r}"):
        envint(NAME, 42)


def test_envint_refuses_a_value_below_the_minimum_and_accepts_the_minimum(monkeypatch):
    monkeypatch.setenv(NAME, "-1")
    with pytest.raises(ImproperlyConfigured, match=f"{NAME} must be at least 0, got -1"):
        envint(NAME, 42)
    monkeypatch.setenv(NAME, "1")
    with pytest.raises(ImproperlyConfigured, match=f"{NAME} must be at least 2, got 1"):
        envint(NAME, 42, minimum=2)
    monkeypatch.setenv(NAME, "2")
    assert envint(NAME, 42, minimum=2) == 2


def test_envint_does_not_check_the_minimum_against_the_default():
    # The default is the code's own choice; only what the environment says is checked.
    assert envint(NAME, 1, minimum=31) == 1


# --- envlist ------------------------------------------------------------------------------------


def test_envlist_is_the_default_when_the_variable_is_unset():
    default = ["a", "b"]
    assert envlist(NAME, default) is default


@pytest.mark.parametrize("raw,items", [
    ("a.example,b.example", ["a.example", "b.example"]),
    (" a.example , b.example ", ["a.example", "b.example"]),
    ("a.example,,b.example,", ["a.example", "b.example"]),
    ("one", ["one"]),
])
def test_envlist_splits_on_commas_trimming_and_dropping_empty_items(monkeypatch, raw, items):
    monkeypatch.setenv(NAME, raw)
    assert envlist(NAME, ["default"]) == items


@pytest.mark.parametrize("raw", ["", " , "])
def test_an_empty_envlist_is_an_empty_list_not_the_default(monkeypatch, raw):
    # Setting the variable empty is how a deployment turns a default list off.
    monkeypatch.setenv(NAME, raw)
    assert envlist(NAME, ["default"]) == []


# --- the apps' integer settings -----------------------------------------------------------------


def test_the_roll_ups_are_kept_as_long_as_the_core_keeps_its_own():
    # The project's defaults are the apps' (settings.APP_INTEGERS reads them); the roll-ups'
    # retention is also a constant of the core's roll-up, which every app's must equal.
    from idemdash.core.rollup import RETENTION_DAYS

    rollups = {name: default for name, (default, _) in idemdash_settings.APP_INTEGERS.items()
               if name.endswith("_ROLLUP_RETENTION_DAYS")}
    assert len(rollups) == 4 and set(rollups.values()) == {RETENTION_DAYS}


@pytest.mark.slow
def test_every_app_integer_setting_is_set_from_its_environment_variable():
    names = list(idemdash_settings.APP_INTEGERS)
    show = f"import json; from django.conf import settings as s; print(json.dumps({{n: getattr(s, n) for n in {names!r}}}))"
    env = {idemdash_settings.ENVIRONMENT_NAMES.get(name, name): str(100 + i) for i, name in enumerate(names)}
    done = _load(show, SECRET_KEY=STRONG_KEY, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {name: 100 + i for i, name in enumerate(names)}


@pytest.mark.slow
@pytest.mark.parametrize("variable,minimum", [
    ("RETENTION_BATCH_SIZE", 1), ("RECEIPTS_MAX_WAIT_SECONDS", 0), ("OUTBOX_LEASE_SECONDS", 2),
    ("WEBHOOKS_ROLLUP_RETENTION_DAYS", 31),
])
def test_an_app_integer_setting_below_its_least_value_stops_the_start(variable, minimum):
    done = _load(SECRET_KEY=STRONG_KEY, **{variable: str(minimum - 1)})
    assert done.returncode != 0
    assert f"ImproperlyConfigured: {variable} must be at least {minimum}, got {minimum - 1}" in done.stderr


# --- the production settings ----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = "k7Qv2xR9mW4pL8nZ3bT6yH1cJ5fG0dS-aE_uI7oP2qX9rV4wM8"
SHOW = (
    "import json; from django.conf import settings as s; "
    "print(json.dumps({'db': {k: s.DATABASES['default'].get(k) for k in ('CONN_MAX_AGE', 'CONN_HEALTH_CHECKS')}, "
    "'storage': s.STORAGES['staticfiles']['BACKEND'], 'middleware': s.MIDDLEWARE, 'key': s.SECRET_KEY}))"
)


def _load(show: str = SHOW, /, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL", "DB_CONN_MAX_AGE"}}
    return subprocess.run(
        [sys.executable, "-c", show], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**base, "DJANGO_SETTINGS_MODULE": "idemdash.settings", **env},
    )


def _settings(**env: str) -> dict:
    done = _load(**env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("key", [
    None,
    "",
    "short",
    "x" * 49 + "y",  # 50 characters, two distinct
    "django-insecure-idemdash-development-key-change-me",
    "django-insecure-" + STRONG_KEY,
])
def test_it_refuses_to_start_without_debug_on_a_missing_or_weak_key(key: str | None):
    done = _load(**({} if key is None else {"SECRET_KEY": key}))
    assert done.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY must be set to at least 50 random characters" in done.stderr


@pytest.mark.slow
def test_it_names_the_development_key_when_that_is_the_problem():
    done = _load(SECRET_KEY="django-insecure-idemdash-development-key-change-me")
    assert "not the development key" in done.stderr


@pytest.mark.slow
def test_manage_py_refuses_too():
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "SECRET_KEY must be set" in done.stderr


@pytest.mark.slow
def test_it_starts_on_a_strong_key():
    assert _settings(SECRET_KEY=STRONG_KEY)["key"] == STRONG_KEY


@pytest.mark.slow
def test_debug_falls_back_to_the_development_key():
    assert _settings(DEBUG="1")["key"].startswith("django-insecure-")


@pytest.mark.slow
def test_persistent_connections_are_health_checked():
    url = "postgres://nobody@127.0.0.1:5432/none"
    assert _settings(SECRET_KEY=STRONG_KEY, DATABASE_URL=url, DB_CONN_MAX_AGE="60")["db"] == {
        "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True,
    }
    assert _settings(SECRET_KEY=STRONG_KEY, DATABASE_URL=url)["db"] == {"CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": False}


@pytest.mark.slow
def test_static_files_are_served_by_whitenoise_under_hashed_compressed_names():
    loaded = _settings(SECRET_KEY=STRONG_KEY)
    assert loaded["storage"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    middleware = loaded["middleware"]
    assert middleware.index("whitenoise.middleware.WhiteNoiseMiddleware") == middleware.index(
        "django.middleware.security.SecurityMiddleware") + 1


@pytest.mark.slow
def test_a_mysql_url_gets_utf8mb4_read_committed_and_a_suffixed_test_database():
    show = (
        "import json; from django.conf import settings as s; d = s.DATABASES['default']; "
        "print(json.dumps({'engine': d['ENGINE'], 'options': d['OPTIONS'], 'test': d['TEST']}))"
    )
    done = _load(show, SECRET_KEY=STRONG_KEY, DATABASE_URL="mysql://root@127.0.0.1:3306/app", IDEMDASH_TEST_DB_SUFFIX="x")
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout)
    assert loaded["engine"] == "django.db.backends.mysql"
    assert loaded["options"]["charset"] == "utf8mb4" and loaded["options"]["isolation_level"] == "read committed"
    assert loaded["test"] == {"NAME": "test_idemdash_x", "CHARSET": "utf8mb4"}


@pytest.mark.slow
def test_another_database_url_is_refused():
    done = _load(SECRET_KEY=STRONG_KEY, DATABASE_URL="oracle://u:p@127.0.0.1:1521/x")
    assert done.returncode != 0 and "MySQL/MariaDB (mysql://)" in done.stderr


# --- beside a host project (docs/host-project.md, "As a separate service") --------------------

HOST_SHOW = (
    "import json; from django.conf import settings as s; "
    "print(json.dumps({'user': s.AUTH_USER_MODEL, 'drain': s.OUTBOX_DRAIN, 'last_app': s.INSTALLED_APPS[-1], "
    "'cluster': s.Q_CLUSTER.get('cluster_name')}))"
)


def _host_settings(**env: str) -> dict:
    done = _load(HOST_SHOW, SECRET_KEY=STRONG_KEY, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_on_its_own_database_it_has_djangos_user_model_and_drains_its_outbox():
    assert _host_settings() == {"user": "auth.User", "drain": True, "last_app": "django.contrib.admin",  # after the dashboard: its admin/base_site.html wins
                                "cluster": None}  # its cluster runs the schedules that name none


@pytest.mark.slow
def test_naming_a_hosts_user_model_loads_the_hosts_apps_and_leaves_the_outbox_to_the_host():
    # django.contrib.flatpages stands in for a host's app: importable, and not idemdash's.
    settings = _host_settings(IDEMDASH_AUTH_USER_MODEL="accounts.User", IDEMDASH_HOST_APPS="django.contrib.flatpages")
    # Its cluster runs only the schedules that name it, not a host cluster's (idemdash/core/schedules.py).
    assert settings == {"user": "accounts.User", "drain": False, "last_app": "django.contrib.flatpages",
                        "cluster": "idemdash-service"}


@pytest.mark.slow
def test_a_service_beside_a_host_drains_when_told_to():
    assert _host_settings(IDEMDASH_AUTH_USER_MODEL="accounts.User", OUTBOX_DRAIN="1")["drain"] is True


@pytest.mark.slow
def test_a_user_model_not_spelled_app_label_dot_model_stops_the_start():
    done = _load(HOST_SHOW, SECRET_KEY=STRONG_KEY, IDEMDASH_AUTH_USER_MODEL="accounts.models.User")
    assert done.returncode != 0
    assert "IDEMDASH_AUTH_USER_MODEL must be app_label.ModelName" in done.stderr
