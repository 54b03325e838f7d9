"""idemdash/settings.py, mail: EMAIL_URL read by dj-email-url into Django 6.1's MAILERS (the
EMAIL_* settings before it), refused at start-up when it names no backend; then the production
settings in a fresh interpreter deliver an email alert's message and Django's test email to a
real SMTP server on 127.0.0.1 (aiosmtpd), logged in with the URL's credentials, and Django
says nothing of deprecated mail settings. `check --deploy` and idemdash.W030 are in
test_settings_security.py."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

import django
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from django.core.exceptions import ImproperlyConfigured

from idemdash.settings import email_settings
from tests.waits import until

# The test SMTP server takes a login over plain text, which aiosmtpd warns of: it listens on
# 127.0.0.1 only.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
ROOT = Path(__file__).resolve().parents[2]
SMTP = "django.core.mail.backends.smtp.EmailBackend"
MAIL_DIR = Path("/srv/var/mail")


@pytest.mark.parametrize(("url", "options"), [
    ("smtp://mail.example.com", {"host": "mail.example.com", "port": 25, "use_tls": False, "use_ssl": False}),
    ("smtp://", {"host": "localhost", "port": 25, "use_tls": False, "use_ssl": False}),
    ("submission://ops%40example.com:p%40ss%3Aw0rd@smtp.example.com?timeout=10",
     {"host": "smtp.example.com", "port": 587, "username": "ops@example.com", "password": "p@ss:w0rd",
      "use_tls": True, "use_ssl": False, "timeout": 10}),
    ("smtp://u:p@smtp.example.com:465?ssl=true",
     {"host": "smtp.example.com", "port": 465, "username": "u", "password": "p", "use_tls": False, "use_ssl": True}),
])
def test_an_smtp_url_gives_the_mailers_options(url, options):
    email = email_settings(url, MAIL_DIR)
    assert (email.backend, email.options) == (SMTP, options)
    assert email.mailer == {"BACKEND": SMTP, "OPTIONS": options}
    assert email.email_settings["EMAIL_BACKEND"] == SMTP
    assert email.email_settings["EMAIL_HOST"] == options["host"]
    assert email.email_settings.get("EMAIL_HOST_PASSWORD") == options.get("password")


@pytest.mark.parametrize(("url", "backend", "options"), [
    ("console:", "console", {}),
    ("memory:", "locmem", {}),
    ("dummy:", "dummy", {}),
    ("file:", "filebased", {"file_path": str(MAIL_DIR)}),
    ("file:///tmp/outgoing", "filebased", {"file_path": "/tmp/outgoing"}),  # dj-email-url alone says tmp/outgoing
])
def test_a_development_backend_takes_no_smtp_options(url, backend, options):
    email = email_settings(url, MAIL_DIR)
    assert email.backend == f"django.core.mail.backends.{backend}.EmailBackend"
    assert email.options == options


@pytest.mark.parametrize("url", ["smtp+tls://u:secret@h", "mailgun://u:secret@h", "secret@h"])
def test_a_url_that_names_no_backend_is_refused_naming_the_variable_not_the_password(url):
    with pytest.raises(ImproperlyConfigured, match="EMAIL_URL must start with one of smtp:") as refused:
        email_settings(url, MAIL_DIR)
    assert "secret" not in str(refused.value)


def _load(code: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in {"DEBUG", "DATABASE_URL", "EMAIL_URL", "DJANGO_ALLOW_ASYNC_UNSAFE"}}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**base, "DJANGO_SETTINGS_MODULE": "idemdash.settings", "SECRET_KEY": secrets.token_urlsafe(50),
             "IDEMDASH_VAR_DIR": env.pop("IDEMDASH_VAR_DIR", str(ROOT / "var")), **env},
    )


@pytest.mark.slow
def test_a_url_that_names_no_backend_stops_the_start():
    done = _load("import django; django.setup()", EMAIL_URL="smtp+tls://ops:hunter2@smtp.example.com")
    assert done.returncode != 0
    assert "ImproperlyConfigured: EMAIL_URL must start with one of" in done.stderr
    assert "hunter2" not in done.stderr


class _Inbox:
    """What aiosmtpd's handler receives: each message with the login it came under."""

    def __init__(self) -> None:
        self.messages: list[tuple[str | None, list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd's name)
        self.messages.append((session.auth_data, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


def _authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (b"ops@example.com", b"p@ss")
    return AuthResult(success=ok, auth_data=auth_data.login.decode() if ok else None)  # kept as session.auth_data


@pytest.fixture
def smtp_server():
    """An SMTP server on 127.0.0.1 that requires a login (over plain text: loopback only)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inbox = _Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port, authenticator=_authenticator,
                            auth_required=True, auth_require_tls=False)
    controller.start()
    try:
        yield port, inbox
    finally:
        controller.stop()


SEND = """
import warnings
import django
{deprecations}
django.setup()
from django.core.management import call_command
from receipts.outbox.actions import ActionContext, email_send
email_send({{"to": "oncall@example.com", "subject": "[idemdash] [FIRING] stuck", "body": "See what caused it"}},
           ActionContext(key="idemdash:alert:7:fired", scope="", attempt=1, timeout=5))
call_command("sendtestemail", "admin@example.com")
"""


@pytest.mark.slow
def test_the_production_settings_deliver_mail_to_the_urls_smtp_server_with_its_login(smtp_server):
    port, inbox = smtp_server
    # Django 6.1 warns of each EMAIL_* setting a project still defines: made an error here.
    deprecations = ("from django.utils.deprecation import RemovedInDjango2028Warning; "
                    "warnings.simplefilter('error', RemovedInDjango2028Warning)") if django.VERSION >= (6, 1) else ""
    done = _load(SEND.format(deprecations=deprecations),
                 EMAIL_URL=f"smtp://ops%40example.com:p%40ss@127.0.0.1:{port}?timeout=10")
    assert done.returncode == 0, done.stderr[-3000:]
    until(lambda: len(inbox.messages) >= 2, "both messages at the SMTP server")
    (alert_login, alert_to, alert), (test_login, test_to, _) = inbox.messages
    assert (alert_login, alert_to, test_login, test_to) == ("ops@example.com", ["oncall@example.com"],
                                                             "ops@example.com", ["admin@example.com"])
    assert b"X-Idempotency-Key: idemdash:alert:7:fired" in alert and b"Subject: [idemdash] [FIRING] stuck" in alert


@pytest.mark.slow
def test_a_wrong_password_fails_the_send_as_one_the_outbox_retries_and_delivers_nothing(smtp_server):
    port, inbox = smtp_server
    done = _load(SEND.format(deprecations=""), EMAIL_URL=f"smtp://ops%40example.com:wrong@127.0.0.1:{port}?timeout=3")
    assert done.returncode != 0 and "receipts.outbox.actions.RetryableError: SMTP" in done.stderr
    assert "wrong" not in done.stderr.split("RetryableError", 1)[1]
    assert inbox.messages == []
