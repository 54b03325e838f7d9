"""The production settings, loaded in a fresh interpreter with a chosen environment (the
suite itself runs tests.settings, which supplies a random key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = "k7Qv2xR9mW4pL8nZ3bT6yH1cJ5fG0dS-aE_uI7oP2qX9rV4wM8"
SHOW = (
    "import json; from django.conf import settings as s; "
    "print(json.dumps({'db': {k: s.DATABASES['default'].get(k) for k in ('CONN_MAX_AGE', 'CONN_HEALTH_CHECKS')}, "
    "'storage': s.STORAGES['staticfiles']['BACKEND'], 'middleware': s.MIDDLEWARE, 'key': s.SECRET_KEY}))"
)


def _load(**env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DATABASE_URL", "DB_CONN_MAX_AGE"}}
    return subprocess.run(
        [sys.executable, "-c", SHOW], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**base, "DJANGO_SETTINGS_MODULE": "idemdash.settings", **env},
    )


def _settings(**env: str) -> dict:
    done = _load(**env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


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


def test_it_names_the_development_key_when_that_is_the_problem():
    done = _load(SECRET_KEY="django-insecure-idemdash-development-key-change-me")
    assert "not the development key" in done.stderr


def test_manage_py_refuses_too():
    base = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE"}}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "SECRET_KEY must be set" in done.stderr


def test_it_starts_on_a_strong_key():
    assert _settings(SECRET_KEY=STRONG_KEY)["key"] == STRONG_KEY


def test_debug_falls_back_to_the_development_key():
    assert _settings(DEBUG="1")["key"].startswith("django-insecure-")


def test_persistent_connections_are_health_checked():
    url = "postgres://nobody@127.0.0.1:5432/none"
    assert _settings(SECRET_KEY=STRONG_KEY, DATABASE_URL=url, DB_CONN_MAX_AGE="60")["db"] == {
        "CONN_MAX_AGE": 60, "CONN_HEALTH_CHECKS": True,
    }
    assert _settings(SECRET_KEY=STRONG_KEY, DATABASE_URL=url)["db"] == {"CONN_MAX_AGE": 0, "CONN_HEALTH_CHECKS": False}


def test_static_files_are_served_by_whitenoise_under_hashed_compressed_names():
    loaded = _settings(SECRET_KEY=STRONG_KEY)
    assert loaded["storage"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    middleware = loaded["middleware"]
    assert middleware.index("whitenoise.middleware.WhiteNoiseMiddleware") == middleware.index(
        "django.middleware.security.SecurityMiddleware") + 1
