"""idemdash/settings.py, its Security section: HTTPS, HSTS and the proxy header from the
environment, so that `manage.py check --deploy` is clean when they are set as
docs/operations.md ("Security") says; and what the server then sends."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from idemdash.settings import proxy_ssl_header
from tests.idemdash.test_settings import ROOT, STRONG_KEY, _load

HTTPS = {
    "SECURE_COOKIES": "true",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
}
# Mail that is delivered (docs/operations.md, Email): without it, idemdash.W030.
EMAIL = {"EMAIL_URL": "submission://ops%40example.com:secret@smtp.example.com"}


def _deploy_env(**env: str) -> dict[str, str]:
    drop = {"DJANGO_SETTINGS_MODULE", "DEBUG", "DJANGO_ALLOW_ASYNC_UNSAFE", *HTTPS, *EMAIL}
    base = {k: v for k, v in os.environ.items() if k not in drop}
    return {**base, "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "idemdash.example.com", **env}


def _check_deploy(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=_deploy_env(**env),
    )


@pytest.mark.slow
def test_check_deploy_is_clean_with_the_documented_https_and_mail_settings():
    done = _check_deploy(**HTTPS, **EMAIL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


@pytest.mark.slow
def test_check_deploy_names_what_is_missing_without_them():
    done = _check_deploy()
    assert done.returncode != 0
    assert set(re.findall(r"(?:security|idemdash|mail)\.[EW]\d+", done.stdout + done.stderr)) == {
        "security.W004",  # HSTS
        "security.W008",  # SSL redirect
        "security.W012",  # session cookie Secure
        "security.W016",  # CSRF cookie Secure
        "idemdash.W030",  # mail printed by the console backend, not delivered (not Django 6.1's mail.E001)
    }


@pytest.mark.slow
@pytest.mark.parametrize("url", ["console:", "file:", "memory:", "dummy:"])
def test_check_deploy_warns_of_mail_that_is_not_delivered_and_only_warns(url):
    done = _check_deploy(**HTTPS, EMAIL_URL=url)
    assert done.returncode != 0 and "idemdash.W030" in done.stderr and "mail.E001" not in done.stderr
    assert "email alerts and email.send messages are not delivered" in done.stderr
    # Below --fail-level WARNING a deployment without mail passes: its alerts may post to a webhook.
    plain = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env=_deploy_env(**HTTPS, EMAIL_URL=url))
    assert plain.returncode == 0, plain.stderr


@pytest.mark.parametrize(("raw", "setting"), [
    ("", None),
    ("  ", None),
    ("X-Forwarded-Proto", ("HTTP_X_FORWARDED_PROTO", "https")),
    (" x-forwarded-proto ", ("HTTP_X_FORWARDED_PROTO", "https")),
    ("X-Forwarded-Ssl", ("HTTP_X_FORWARDED_SSL", "https")),
])
def test_the_proxy_header_is_read_as_a_header_name(raw, setting):
    assert proxy_ssl_header(raw) == setting


@pytest.mark.parametrize("raw", ["X-Forwarded-Proto: https", "HTTP_X_FORWARDED_PROTO,https", "X Forwarded"])
def test_anything_but_a_header_name_stops_the_start(raw):
    with pytest.raises(ImproperlyConfigured, match="SECURE_PROXY_SSL_HEADER must be a header name"):
        proxy_ssl_header(raw)


@pytest.mark.django_db
def test_behind_the_proxy_https_answers_carry_hsts_and_plain_http_is_redirected(settings):
    settings.SECURE_HSTS_SECONDS = 31536000
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_HSTS_PRELOAD = True
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_PROXY_SSL_HEADER = proxy_ssl_header("X-Forwarded-Proto")
    client = Client()
    plain = client.get("/accounts/login/")
    assert plain.status_code == 301 and plain["Location"] == "https://testserver/accounts/login/"
    secure = client.get("/accounts/login/", HTTP_X_FORWARDED_PROTO="https")
    assert secure.status_code == 200
    assert secure["Strict-Transport-Security"] == "max-age=31536000; includeSubDomains; preload"


@pytest.mark.slow
def test_the_throttles_are_read_from_the_environment_with_documented_defaults():
    show = ("import json; from django.conf import settings as s; print(json.dumps({n: str(getattr(s, n)) for n in ("
            "'AXES_FAILURE_LIMIT', 'AXES_COOLOFF_TIME', 'API_TOKEN_FAILURE_LIMIT', 'API_TOKEN_FAILURE_WINDOW_SECONDS', "
            "'TRUSTED_PROXY_COUNT')}))")
    env = {"SECRET_KEY": STRONG_KEY, "API_TOKEN_FAILURE_LIMIT": ""}  # tests/settings.py sets one for the suite
    assert _settings_shown(show, **env) == {
        "AXES_FAILURE_LIMIT": "5", "AXES_COOLOFF_TIME": "0:15:00", "API_TOKEN_FAILURE_LIMIT": "20",
        "API_TOKEN_FAILURE_WINDOW_SECONDS": "60", "TRUSTED_PROXY_COUNT": "0",
    }
    assert _settings_shown(show, **{**env, "LOGIN_FAILURE_LIMIT": "3", "LOGIN_LOCKOUT_MINUTES": "90",
                                    "API_TOKEN_FAILURE_LIMIT": "7", "API_TOKEN_FAILURE_WINDOW_SECONDS": "600",
                                    "TRUSTED_PROXY_COUNT": "2"}) == {
        "AXES_FAILURE_LIMIT": "3", "AXES_COOLOFF_TIME": "1:30:00", "API_TOKEN_FAILURE_LIMIT": "7",
        "API_TOKEN_FAILURE_WINDOW_SECONDS": "600", "TRUSTED_PROXY_COUNT": "2",
    }
    refused = _load(show, **env, LOGIN_FAILURE_LIMIT="0")
    assert "LOGIN_FAILURE_LIMIT must be at least 1" in refused.stderr


def _settings_shown(show: str, **env: str) -> dict:
    done = _load(show, **env)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)

