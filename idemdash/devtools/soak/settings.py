"""Settings for `make soak`: the bench's (production's plus the devtools and bench apps, kept
connections) plus the soak app, with leases and back-offs short enough that what a killed
process held comes back within the soak rather than after the production defaults' minutes."""

from idemdash.devtools.bench.settings import *  # noqa: F403
from idemdash.devtools.bench.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "idemdash.devtools.soak"]
ROOT_URLCONF = "idemdash.devtools.soak.urls"

RECEIPTS_OPERATIONS = {"soak.effect": {"lease_seconds": 5}}
WEBHOOKS_LEASE_SECONDS = 5
WEBHOOKS_BACKOFF_BASE = 1
WEBHOOKS_BACKOFF_CAP = 5
WEBHOOKS_MAX_ATTEMPTS = 50  # a terminated backend is a failed attempt: the soak must not run out
WEBHOOKS_REQUEUE_AFTER_SECONDS = 10
WEBHOOKS_REQUEUE_IDLE_SECONDS = 5
OUTBOX_LEASE_SECONDS = 5
OUTBOX_MAX_ATTEMPTS = 50
OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
OUTBOX_BACKOFF_CAP_SECONDS = 5
