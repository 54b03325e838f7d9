import os

import dj_database_url

SECRET_KEY = os.environ["SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS: list[str] = []

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "idemdash.core",
    "receipts",
    "shop",
]
DATABASES = {"default": dj_database_url.config(conn_max_age=0)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# shop.tasks.send_invoice: a key whose attempt died before it settled is held, not re-run.
RECEIPTS_OPERATIONS = {"invoice.send": {"after_crash": "hold", "lease_seconds": 2}}

CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
CELERY_RESULT_BACKEND = os.environ["CELERY_RESULT_BACKEND"]
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # With acks_late a task stays unacknowledged in Redis until it settles; a message whose
    # worker died is delivered again once it has been unacknowledged this long. Longer than
    # the longest task, or a task still running is delivered a second time.
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "3600")),
    # Look for such messages every second (kombu's default: every 100 s).
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
    # Every key this project makes in Redis carries this prefix: two deployments (or test
    # runs) can share one Redis database.
    "global_keyprefix": os.environ.get("CELERY_KEY_PREFIX", ""),
}
CELERY_RESULT_BACKEND_TRANSPORT_OPTIONS = {"global_keyprefix": os.environ.get("CELERY_KEY_PREFIX", "")}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
# acks_late: one task at a time per worker process, as Celery's docs advise.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
