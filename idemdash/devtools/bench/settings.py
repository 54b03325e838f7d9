"""Settings for `make bench`: the devtools settings (production's plus the devtools app)
plus the bench app, its URLs and the knobs below.

Connections are kept open between requests (as a production deployment behind gunicorn
would): opening a PostgreSQL connection costs a few milliseconds, more than the work
being measured, and would hide the overhead we want to see.
"""

import importlib.util
import os

from idemdash.devtools.settings import *  # noqa: F403
from idemdash.devtools.settings import INSTALLED_APPS, LOGGING
from idemdash.settings import envint

INSTALLED_APPS = [*INSTALLED_APPS, "idemdash.devtools.bench"]
# Scenario 8 compares a DRF view under idemdash and under drf-idempotency (the `bench` extra).
INSTALLED_APPS += [app for app in ("rest_framework", "drf_idempotency") if importlib.util.find_spec(app)]
ROOT_URLCONF = "idemdash.devtools.bench.urls"
# The bare insert, the yardstick, is a route nothing protects: without the observer of such
# routes (receipts/observe.py) it stays what every figure is compared with. Its cost is
# scenario 14, against a server with it kept (idemdash/devtools/bench/observed_settings.py),
# and the in-process bench's path `observed` (idemdash/devtools/bench/inprocess.py).
OBSERVER = "receipts.observe.ObserveMiddleware"
MIDDLEWARE = [m for m in MIDDLEWARE if m != OBSERVER]  # noqa: F405
DATABASES["default"]["CONN_MAX_AGE"] = envint("DB_CONN_MAX_AGE", 600)  # noqa: F405
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # noqa: F405
# The bench measures views, never static files, and runs no collectstatic: unhashed names.
STORAGES = {**STORAGES, "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}}  # noqa: F405
# One log line per request would cost more than the request.
LOGGING["root"]["level"] = "WARNING"

# An experiment, not a recommendation: BENCH_SYNCHRONOUS_COMMIT=off shows how much of a
# gap between two variants is WAL flushes at commit (the protected path commits more often).
if os.environ.get("BENCH_SYNCHRONOUS_COMMIT") and DATABASES["default"]["ENGINE"].endswith("postgresql"):  # noqa: F405
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = (  # noqa: F405
        "-c synchronous_commit=" + os.environ["BENCH_SYNCHRONOUS_COMMIT"]
    )
