import json
import os

SECRET_KEY = os.environ["PAYDESK_SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "payments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "payments.auth.GatewayUserMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
AUTHENTICATION_BACKENDS = ["django.contrib.auth.backends.RemoteUserBackend"]

ROOT_URLCONF = "paydesk.urls"
ASGI_APPLICATION = "paydesk.asgi.application"

# The project's database, as its deployment gives it (JSON of Django's DATABASES entry).
DATABASES = {"default": json.loads(os.environ["PAYDESK_DATABASE"])}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

USE_TZ = True
TIME_ZONE = "UTC"

# A capture, a charge or a transfer sent again under a new key is a client's retry, never a
# second payment: refused, naming the key it was first sent under. The same payout twice may
# be meant (the default: it runs, and the dashboard counts it).
RECEIPTS_OPERATIONS = {
    "payments.capture": {"fresh_key": "refuse"},
    "charges.create": {"fresh_key": "refuse"},
    "transfers.create": {"fresh_key": "refuse"},
}
