"""Settings for `make bench`: production settings plus the bench app and its URLs.

Connections are kept open between requests (as a production deployment behind gunicorn
would): opening a PostgreSQL connection costs a few milliseconds, more than the work
being measured, and would hide the overhead we want to see.
"""

from idemdash.settings import *  # noqa: F403
from idemdash.settings import INSTALLED_APPS, LOGGING, envint

INSTALLED_APPS = [*INSTALLED_APPS, "idemdash.bench"]
ROOT_URLCONF = "idemdash.bench.urls"
DATABASES["default"]["CONN_MAX_AGE"] = envint("DB_CONN_MAX_AGE", 600)  # noqa: F405
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # noqa: F405
# One log line per request would cost more than the request.
LOGGING["root"]["level"] = "WARNING"
