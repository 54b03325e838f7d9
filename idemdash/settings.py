"""idemdash settings, read from the environment.

Every variable is documented under docs/ (most in docs/operations.md, "Configuration"; tests/test_docs.py
checks that none is missing). A value that cannot be parsed raises
ImproperlyConfigured naming the variable, so a typo in a deployment fails at start-up
instead of silently falling back to a default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
import dj_email_url
import django
from django.core.exceptions import ImproperlyConfigured

from idemdash.core import throttle
from idemdash.worker import conf as worker_conf
from receipts import conf as receipts_conf
from receipts.outbox import conf as outbox_conf
from webhooks import conf as webhooks_conf

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("IDEMDASH_VAR_DIR", BASE_DIR / "var"))

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def envbool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false, yes/no), got {raw!r}")


def envint(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class EmailSettings:
    """Where mail goes, from EMAIL_URL: a backend and its options, named as MAILERS names them
    (Django 6.1), with the EMAIL_* setting each one is before it (`SETTINGS`)."""

    backend: str
    options: dict[str, Any]
    SETTINGS = {"host": "EMAIL_HOST", "port": "EMAIL_PORT", "username": "EMAIL_HOST_USER",
                "password": "EMAIL_HOST_PASSWORD", "use_tls": "EMAIL_USE_TLS", "use_ssl": "EMAIL_USE_SSL",
                "timeout": "EMAIL_TIMEOUT", "file_path": "EMAIL_FILE_PATH"}

    @property
    def mailer(self) -> dict[str, Any]:
        return {"BACKEND": self.backend, "OPTIONS": self.options}

    @property
    def email_settings(self) -> dict[str, Any]:
        return {"EMAIL_BACKEND": self.backend, **{self.SETTINGS[k]: v for k, v in self.options.items()}}


def email_settings(url: str, mail_dir: Path) -> EmailSettings:
    """EMAIL_URL read by dj-email-url; refused at start-up when its scheme names no backend.
    `file:` writes to `mail_dir`, `file:///path` to /path (dj-email-url would drop its
    leading slash)."""
    parsed = dj_email_url.parse(url)
    scheme = urlsplit(url).scheme
    if "EMAIL_BACKEND" not in parsed:
        raise ImproperlyConfigured(
            f"EMAIL_URL must start with one of {', '.join(s + ':' for s in dj_email_url.SCHEMES)}, got {scheme!r}")
    if scheme == "file":
        return EmailSettings(parsed["EMAIL_BACKEND"], {"file_path": str(urlsplit(url).path or mail_dir)})
    if parsed["EMAIL_BACKEND"] != "django.core.mail.backends.smtp.EmailBackend":
        return EmailSettings(parsed["EMAIL_BACKEND"], {})
    options = {option: parsed[name] for option, name in EmailSettings.SETTINGS.items() if name != "EMAIL_FILE_PATH"}
    return EmailSettings(parsed["EMAIL_BACKEND"], {k: v for k, v in options.items() if v is not None})


def envlist(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


DEBUG = envbool("DEBUG", False)
DEVELOPMENT_SECRET_KEY = "django-insecure-idemdash-development-key-change-me"
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if DEBUG:
    SECRET_KEY = SECRET_KEY or DEVELOPMENT_SECRET_KEY
elif len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure-"):
    # Fail closed: sessions, CSRF tokens and password-reset links are signed with this key,
    # so a site without DEBUG never starts on a guessable one. (`make demo` and the test
    # suite make their own random key.)
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to at least 50 random characters when DEBUG is off"
        + (", not the development key" if SECRET_KEY.startswith("django-insecure-") else "")
        + "; e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])
# Where operators open the dashboard: alert notifications link there. The default is
# `make demo`'s address; set it in production.
IDEMDASH_BASE_URL = os.environ.get(
    "IDEMDASH_BASE_URL", f"http://127.0.0.1:{os.environ.get('IDEMDASH_PORT', '8000')}"
).strip().rstrip("/")
# An incident nobody acknowledged is reminded about every this many evaluations (one a
# minute), at most this many times (idemdash.dashboard.incidents).
IDEMDASH_INCIDENT_REMIND_EVERY = envint("IDEMDASH_INCIDENT_REMIND_EVERY", 30, minimum=1)
IDEMDASH_INCIDENT_REMINDERS = envint("IDEMDASH_INCIDENT_REMINDERS", 2)
# Who the alert rules that migrate installs once email (empty: none installed; docs/dashboard.md, Alerts).
IDEMDASH_DEFAULT_ALERTS_TO = os.environ.get("IDEMDASH_DEFAULT_ALERTS_TO", "admin@localhost").strip()
# OpenTelemetry export by OTLP/HTTP (the OTEL_EXPORTER_OTLP_* variables say where) and the
# figures of /metrics as OpenTelemetry instruments (docs/operations.md, "OpenTelemetry").
IDEMDASH_OTEL = envbool("IDEMDASH_OTEL", False)
IDEMDASH_OTEL_METRICS = envbool("IDEMDASH_OTEL_METRICS", False)

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "axes",  # the login lockout (Security, below)
    "idemdash.worker",  # before django_q: its `qcluster` stops cleanly on SIGTERM
    "django_q",
    "idemdash.core",  # the models every app shares: audit log, API clients, bulk runs, roll-ups
    "receipts",
    "receipts.outbox",
    "webhooks",
    "idemdash.dashboard",
    # After the dashboard, whose templates/admin/base_site.html gives the admin the favicon
    # of every other page.
    "django.contrib.admin",
]

# --- Beside a host project, on its database (docs/host-project.md, "As a separate service") ---
# The host's user model ("accounts.User"), and the host's apps to load for it (its import
# paths, comma-separated; the project must be on PYTHONPATH). Naming the user model says the
# database is a host's: the worker then leaves the outbox to the host's own worker unless
# OUTBOX_DRAIN is set (below).
IDEMDASH_AUTH_USER_MODEL = os.environ.get("IDEMDASH_AUTH_USER_MODEL", "").strip()
IDEMDASH_HOST_APPS = envlist("IDEMDASH_HOST_APPS", [])
if IDEMDASH_AUTH_USER_MODEL:
    if IDEMDASH_AUTH_USER_MODEL.count(".") != 1:
        raise ImproperlyConfigured(
            f"IDEMDASH_AUTH_USER_MODEL must be app_label.ModelName, e.g. accounts.User, got {IDEMDASH_AUTH_USER_MODEL!r}"
        )
    AUTH_USER_MODEL = IDEMDASH_AUTH_USER_MODEL
INSTALLED_APPS += IDEMDASH_HOST_APPS

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Serves /static/ from STATIC_ROOT (and, with DEBUG, from the finders), so gunicorn alone
    # serves the whole dashboard; a proxy in front is optional.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Outermost of ours, so it sees every HTML page as it leaves: bidi controls and invisible
    # characters from data shown as visible marks, on every page and the admin alike.
    "idemdash.core.caller_text.RevealHiddenTextMiddleware",
    # Before anything reads a body: gives Django the body of a chunked request.
    "receipts.middleware.ChunkedBodyMiddleware",
    # A NUL in a path or query parameter: 400, not a database error in a view.
    "receipts.middleware.MalformedRequestMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # After the caller is known: notes writes to routes no receipt protects (receipts/observe.py).
    "receipts.observe.ObserveMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Turns a locked-out login into its page (AXES_LOCKOUT_TEMPLATE).
    "axes.middleware.AxesMiddleware",
    # Last, so that it sees exceptions from views (process_exception runs bottom-up).
    "receipts.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "idemdash.urls"
WSGI_APPLICATION = "idemdash.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The dashboard's templates are its app's (idemdash/dashboard/templates links to the
        # top-level templates/, so that the wheel carries them): found through APP_DIRS.
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
# PostgreSQL in production (DATABASE_URL); an embedded SQLite file otherwise, so a fresh
# checkout runs with no server. SQLite is set up for several writer processes: WAL lets
# readers proceed during a write, IMMEDIATE transactions take the write lock up front (so
# two writers queue on the busy timeout instead of failing with "database is locked" when
# they upgrade a read lock), and the busy timeout is how long they queue.
DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
TEST_DB_SUFFIX = os.environ.get("IDEMDASH_TEST_DB_SUFFIX", "").strip()
_test_suffix = f"_{TEST_DB_SUFFIX}" if TEST_DB_SUFFIX else ""
if DATABASE_URL:
    try:
        _db = dj_database_url.parse(DATABASE_URL, conn_max_age=envint("DB_CONN_MAX_AGE", 0))
    except Exception as exc:  # dj-database-url raises several types for bad URLs
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
    # A persistent connection the server dropped (a restart, a failover, an idle timeout,
    # pg_terminate_backend) is noticed at the start of the next request and replaced,
    # instead of failing that request with a 503.
    _db["CONN_HEALTH_CHECKS"] = _db["CONN_MAX_AGE"] != 0
    if _db.get("ENGINE") not in {
        "django.db.backends.postgresql",
        "django.db.backends.sqlite3",
        "django.db.backends.mysql",
    }:
        raise ImproperlyConfigured(
            "DATABASE_URL must point to PostgreSQL (postgres://), MySQL/MariaDB (mysql://) or SQLite (sqlite:///)"
        )
    if _db["ENGINE"] != "django.db.backends.sqlite3":
        _db.setdefault("OPTIONS", {}).setdefault("connect_timeout", envint("DB_CONNECT_TIMEOUT", 5, minimum=1))
        _db["TEST"] = {"NAME": f"test_idemdash{_test_suffix}"}
    if _db["ENGINE"] == "django.db.backends.postgresql":
        # Lets the fast paths (idemdash/core/pg.py) prepare their few statements on persistent
        # connections; the ORM binds on the client and never prepares, whatever the value.
        # Off for PgBouncer in transaction mode before 1.21, which cannot route them.
        if envbool("DB_PREPARED_STATEMENTS", True):
            _db["OPTIONS"].setdefault("prepare_threshold", 5)
    if _db["ENGINE"] == "django.db.backends.mysql":
        # MySQL/MariaDB (the mysql extra): the path host projects on MySQL take, which CI runs
        # the receipts, outbox and webhooks suites on (docs/receipt-store.md: Databases).
        # utf8mb4 for any text a caller sends; READ COMMITTED (Django's default, spelled out)
        # so that a claim's re-read sees the row another transaction just committed.
        _db["OPTIONS"].setdefault("charset", "utf8mb4")
        _db["OPTIONS"].setdefault("isolation_level", "read committed")
        _db["TEST"]["CHARSET"] = "utf8mb4"
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    _db = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "idemdash.sqlite3",
    }
if _db["ENGINE"] == "django.db.backends.sqlite3":
    _db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": envint("SQLITE_BUSY_TIMEOUT", 30, minimum=1),
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not the in-memory default: the concurrency tests open the test database
    # from several OS processes.
    _db["TEST"] = {"NAME": str(VAR_DIR / f"test{_test_suffix}.sqlite3")}
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

TIME_ZONE = os.environ.get("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    # The dashboard's static files: idemdash/dashboard/static links to the top-level static/.
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # static/vendor/plotly.min.js, straight from the installed plotly package.
    "idemdash.dashboard.vendor.PlotlyFinder",
]
# collectstatic writes every file under a content-hashed name plus a gzip copy; WhiteNoise
# serves the hashed names with a ten-year immutable Cache-Control. A page that names a file
# collectstatic has not seen fails (manifest_strict), so a forgotten collectstatic shows.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# --- Email (outbox email.send, alert notifications) --------------------------------------
# One variable, EMAIL_URL, parsed by dj-email-url: smtp://user:password@host:25,
# submission://user:password@host (STARTTLS on 587), ?ssl=true, ?timeout=10, or a development
# backend (console:, file:, memory:, dummy:). Unset, mail is printed by the console backend, and
# `check --deploy` warns (idemdash.W030). Django 6.1 configures mail through MAILERS (its EMAIL_*
# settings are deprecated there); before it, through the EMAIL_* settings.
# A name in lower case is not a setting: the URL, which may hold a password, is not kept whole.
_email = email_settings(os.environ.get("EMAIL_URL", "").strip() or "console:", VAR_DIR / "mail")
if django.VERSION >= (6, 1):
    MAILERS = {"default": _email.mailer}
    # idemdash.W030 says the same on every Django version, as a warning (idemdash/dashboard/checks.py).
    SILENCED_SYSTEM_CHECKS = ["mail.E001"]
else:
    globals().update(_email.email_settings)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "idemdash@localhost")

# --- Background work: django-q2 -----------------------------------------------------------
# The ORM broker needs no extra server; REDIS_URL switches to Redis. `timeout` stays below
# `retry` so the broker never hands a task that is still running to a second worker.
REDIS_URL = os.environ.get("REDIS_URL", "").strip()
Q_CLUSTER = {
    "name": "idemdash",
    "workers": envint("Q_WORKERS", 2, minimum=1),
    "timeout": 60,
    "retry": 120,
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    "poll": 0.5,
    # Successful tasks are not stored: every task's outcome is already on its own row (the
    # event, the outbox message), and storing each result cost a COUNT and an INSERT per
    # task. Failed tasks are still stored, for the admin.
    "save_limit": envint("Q_SAVE_LIMIT", -1, minimum=-1),
    "label": "Background tasks",
    # Present (even empty) so that django-q2's Q_CLUSTER_NAME variable can name a separate
    # queue, as the Redis broker test does; django-q2 fails on that variable without it.
    "ALT_CLUSTERS": {},
}
if REDIS_URL:
    Q_CLUSTER["redis"] = REDIS_URL
else:
    Q_CLUSTER["orm"] = "default"
if IDEMDASH_AUTH_USER_MODEL:
    # Beside a host project, whose own django-q2 cluster may share this database's schedule
    # table: a cluster_name other than its name makes this cluster run only the schedules that
    # name it (django-q2 runs a schedule naming none in every cluster whose two names agree),
    # and idemdash's are installed naming it (idemdash/core/schedules.py), so neither cluster
    # runs the other's.
    Q_CLUSTER["cluster_name"] = "idemdash-service"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    # URL userinfo masked in every line (httpx logs each request's URL at INFO).
    "filters": {"mask": {"()": "idemdash.core.masking.MaskingFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["mask"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # A line per request (access log, and a warning per 4xx): `make demo` sets ERROR, since
        # there 409s and 422s are the simulated traffic, not news.
        "django.server": {"level": os.environ.get("REQUEST_LOG_LEVEL", "INFO")},
        "django.request": {"level": os.environ.get("REQUEST_LOG_LEVEL", "INFO")},
    },
}

# Header names whose values pages, the admin and logs mask (idemdash/core/masking.py);
# unset, its DEFAULT_MASKED_HEADERS.
if "RECEIPTS_MASKED_HEADERS" in os.environ:
    RECEIPTS_MASKED_HEADERS = envlist("RECEIPTS_MASKED_HEADERS", [])

# --- Webhooks -----------------------------------------------------------------------------
# A secret set here creates the endpoint /webhooks/<provider>/ with no manual step. Secrets
# are read only by webhooks.endpoints and never logged.
STRIPE_WEBHOOK_SECRET = os.environ.get("STRIPE_WEBHOOK_SECRET", "").strip()
SHOPIFY_WEBHOOK_SECRET = os.environ.get("SHOPIFY_WEBHOOK_SECRET", "").strip()
STANDARD_WEBHOOK_SECRET = os.environ.get("STANDARD_WEBHOOK_SECRET", "").strip()

# --- The apps' integer settings -------------------------------------------------------------
# Each app reads flat settings with its own defaults (receipts/conf.py, receipts/outbox/conf.py,
# webhooks/conf.py, idemdash/worker/conf.py, and the core's throttle: idemdash/core/throttle.py);
# this project sets every integer one from the
# environment variable of the same name (ENVIRONMENT_NAMES: the few named otherwise), defaulting
# to the app's own, and refuses a value below 1 (or its `_LEAST`). RECEIPTS_OPERATIONS and
# RECEIPTS_FINANCIAL_OPERATIONS keep the app's defaults (docs/receipt-store.md, "Operation policies").
_APP_DEFAULTS = {**receipts_conf.DEFAULTS, **outbox_conf.DEFAULTS, **webhooks_conf.DEFAULTS, **worker_conf.DEFAULTS,
                 **throttle.DEFAULTS}
# Left at the app's default here (a host project sets them in its own settings): the lease
# cap and the observer's (docs/host-project.md, docs/coverage.md).
_NOT_FROM_ENVIRONMENT = {
    "RECEIPTS_MAX_LEASE_SECONDS", "RECEIPTS_OBSERVE_WINDOW_SECONDS", "RECEIPTS_OBSERVE_MAX_BODY_BYTES",
    "RECEIPTS_OBSERVE_FLUSH_SECONDS", "RECEIPTS_OBSERVE_RETENTION_HOURS", "RECEIPTS_FRESH_KEY_WINDOW_SECONDS",
}
# setting: least value the environment may give, where it is not 1
_LEAST = {
    "RECEIPTS_MAX_WAIT_SECONDS": 0,
    "RECEIPTS_MAX_WAITERS": 0,
    # The roll-ups and the audit log are charted over 30 days: they keep at least that.
    "RECEIPTS_ROLLUP_RETENTION_DAYS": 31,
    "RECEIPTS_AUDIT_RETENTION_DAYS": 31,
    "OUTBOX_MESSAGE_ROLLUP_RETENTION_DAYS": 31,
    "OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS": 31,
    "WEBHOOKS_ROLLUP_RETENTION_DAYS": 31,
    # The lease must outlast one action, whose timeout is kept below it.
    "OUTBOX_LEASE_SECONDS": 2,
    "WORKER_TICK_SECONDS": 0,  # 0: no tick
    "WORKER_STALE_SECONDS": 5,
    "TRUSTED_PROXY_COUNT": 0,
}
# setting: (default, least value the environment may give)
APP_INTEGERS: dict[str, tuple[int, int]] = {
    name: (default, _LEAST.get(name, 1)) for name, default in _APP_DEFAULTS.items()
    if type(default) is int and name not in _NOT_FROM_ENVIRONMENT  # not bool: OUTBOX_DRAIN is below
}
# The one default this project chooses itself: rows per purge transaction. On PostgreSQL a
# batch locks only its own expired rows (SKIP LOCKED), so larger batches cost requests little
# and purge faster (5,000: about 1.3-1.5x the rate of 1,000); on SQLite a batch holds the one
# write lock, which every claim queues behind: there, the app's default.
if _db["ENGINE"] == "django.db.backends.postgresql":
    APP_INTEGERS["RECEIPTS_RETENTION_BATCH_SIZE"] = (5000, 1)
# The environment variables not named as their setting: the names these had before the
# settings were the apps' own, kept so that no deployment has to change.
ENVIRONMENT_NAMES = {
    "RECEIPTS_DEFAULT_TTL_SECONDS": "RECEIPTS_DEFAULT_TTL",
    "RECEIPTS_FINANCIAL_TTL_SECONDS": "RECEIPTS_FINANCIAL_TTL",
    "RECEIPTS_RETENTION_BATCH_SIZE": "RETENTION_BATCH_SIZE",
}
globals().update(
    {
        setting: envint(ENVIRONMENT_NAMES.get(setting, setting), default, minimum=minimum)
        for setting, (default, minimum) in APP_INTEGERS.items()
    }
)
# Whether the worker drains the outbox: idemdash's own outbox, yes; a host's (the database
# of IDEMDASH_AUTH_USER_MODEL), only when asked, since the host's worker has its actions and
# its mail backend (receipts/outbox/tasks.py).
OUTBOX_DRAIN = envbool("OUTBOX_DRAIN", not IDEMDASH_AUTH_USER_MODEL)
# Hosts http.post may reach (comma-separated), at any address; empty allows any host at a
# public address only (receipts/outbox/fence.py). `make demo` adds 127.0.0.1.
OUTBOX_HTTP_ALLOWED_HOSTS = envlist("OUTBOX_HTTP_ALLOWED_HOSTS", [])
# This server's own pages are named under idemdash/ (the login page, 403, 404, 500: idemdash/urls.py
# and idemdash/errors.py), so that a host mounting the dashboard keeps its own.
RECEIPTS_UNAVAILABLE_TEMPLATE = "idemdash/503.html"

# --- Security: HTTPS, HSTS, the Content-Security-Policy, throttling ----------------------------
# docs/operations.md, "Security". With HTTPS set up as that page says, `check --deploy` is
# clean (tests/idemdash/test_settings_security.py). SECURE_COOKIES (above) marks the session
# and CSRF cookies Secure.
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", False)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)


def proxy_ssl_header(name: str) -> tuple[str, str] | None:
    """SECURE_PROXY_SSL_HEADER from the name of the header a TLS-ending proxy sets to `https`
    (`X-Forwarded-Proto`); None when unset. Set it only behind such a proxy, which must
    overwrite the header whatever the client sent."""
    name = name.strip()
    if not name:
        return None
    if not all(c.isalnum() or c == "-" for c in name):
        raise ImproperlyConfigured(f"SECURE_PROXY_SSL_HEADER must be a header name such as X-Forwarded-Proto, got {name!r}")
    return "HTTP_" + name.upper().replace("-", "_"), "https"


SECURE_PROXY_SSL_HEADER = proxy_ssl_header(os.environ.get("SECURE_PROXY_SSL_HEADER", ""))
# The throttles (TRUSTED_PROXY_COUNT and API_TOKEN_FAILURE_*, read with the apps' integers
# above): bad API tokens, at most API_TOKEN_FAILURE_LIMIT per client address per window, then
# 429 with Retry-After until the window ends (idemdash/core/clients.py:refused); the address
# is the one the outermost of TRUSTED_PROXY_COUNT proxies saw (idemdash/core/throttle.py:client_ip).
# The counts live in a cache every gunicorn worker shares: Redis when REDIS_URL is set, else a
# table in the database (created by `migrate`, idemdash/dashboard/apps.py). `default` stays
# per process.
API_TOKEN_THROTTLE_CACHE = "throttle"
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "throttle": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": "idemdash"}
        if REDIS_URL
        else {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": "idemdash_cache"}
    ),
}

# The login form and the admin's: django-axes refuses a username from an address after
# LOGIN_FAILURE_LIMIT failed logins in a row, for LOGIN_LOCKOUT_MINUTES (a failure meanwhile
# starts them again), with the page idemdash/locked_out.html (429). Attempts are rows in
# the database, so every worker sees them; a successful login clears them.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out login before checking it
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "idemdash.core.throttle.client_ip"
AXES_USERNAME_CALLABLE = "idemdash.core.throttle.login_username"
AXES_LOCKOUT_TEMPLATE = "idemdash/locked_out.html"

# The Content-Security-Policy of every page: scripts, styles, images and requests from this
# site only, no plugins, no framing, forms posting here only. The dashboard has no inline
# script (the charts' data are JSON blocks, which are not run) and no style attribute; htmx
# evaluates nothing and injects no styles (templates/dashboard/base.html, static/css/idemdash.css).
# Django 6's own middleware where it exists, django-csp on Django 5.2; both take these lists.
# tests/dashboard/test_browser_csp.py drives the pages in Chromium and counts violations.
CSP_DIRECTIVES = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    # <style> elements only, not style attributes: Plotly adds its rules (and the bundled
    # maplibre's) as <style> elements it makes itself, which no nonce or stable hash covers.
    # With images and fonts from this site only, an injected stylesheet could not send
    # anything elsewhere.
    "style-src-elem": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
if django.VERSION >= (6, 0):
    SECURE_CSP = CSP_DIRECTIVES
    CSP_MIDDLEWARE = "django.middleware.csp.ContentSecurityPolicyMiddleware"
else:
    CONTENT_SECURITY_POLICY = {"DIRECTIVES": CSP_DIRECTIVES}
    CSP_MIDDLEWARE = "csp.middleware.CSPMiddleware"
# Runs CSP_MIDDLEWARE on the pages only, not on the APIs' JSON (idemdash/security.py).
MIDDLEWARE.insert(MIDDLEWARE.index("django.middleware.clickjacking.XFrameOptionsMiddleware") + 1,
                  "idemdash.security.PagesPolicyMiddleware")
