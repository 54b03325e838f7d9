"""Settings for pytest: the devtools settings (the project's own plus the devtools app, whose
demo, simulator and seeder the suite tests too), with a random SECRET_KEY for this run and
static files served straight from the finders.

The key goes into os.environ before the project's settings read it, so that every server
and worker a test starts as a subprocess (they inherit the environment) signs and checks
sessions with the same key. Production settings refuse to start without a strong key;
this is the one place the suite supplies it, rather than a weaker rule under tests.
"""

import os
import secrets
from importlib.util import find_spec

os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
# The suite sends many bad tokens from 127.0.0.1 on purpose; tests/core/test_clients.py
# sets the limit it tests, here and in its gunicorn.
os.environ.setdefault("API_TOKEN_FAILURE_LIMIT", "100000")
# Under pytest-xdist (.ci/run's `-n 3`) each worker has databases of its own: the worker's id
# joins IDEMDASH_TEST_DB_SUFFIX, from which the test database and every database a test makes
# for a host project, the production settings or the bench take their names; the servers and
# workers a test starts inherit it.
if worker := os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["IDEMDASH_TEST_DB_SUFFIX"] = "_".join(filter(None, [os.environ.get("IDEMDASH_TEST_DB_SUFFIX"), worker]))

from idemdash.devtools.settings import *  # noqa: E402, F403

# The manifest storage needs `collectstatic` before any page can render; the suite renders
# pages without running it, so names stay unhashed and WhiteNoise finds the files where
# they live. tests/test_production.py runs the production settings, collectstatic included.
STORAGES = {
    **STORAGES,  # noqa: F405
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True
# Each test client builds the middleware anew; without autorefresh WhiteNoise indexes every
# static file from the finders each time (about 40 ms a client, most of a view test's time).
# With it, a file is looked up when it is asked for, as under `runserver`.
WHITENOISE_AUTOREFRESH = True
STATIC_ROOT = None  # nothing is collected, so there is no folder for WhiteNoise to index

# django.tasks (Django 6's own, or on Django 5.2 the django-tasks backport: the dev extra
# installs it on Python 3.11, where Django is 5.2) with django-tasks-db's database backend
# (the dev extra): its `db_worker` runs tasks from a table of the test database
# (tests/receipts/test_django_tasks.py).
if find_spec("django_tasks_db") and (find_spec("django.tasks") or find_spec("django_tasks")):
    BACKPORT = [] if find_spec("django.tasks") else ["django_tasks"]
    INSTALLED_APPS = [*INSTALLED_APPS, *BACKPORT, "django_tasks_db"]  # noqa: F405
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

# A fast hasher, as Django's testing docs advise: the suite logs users in by the hundred (the
# lockout and hostile-login tests), and PBKDF2 costs each login most of a second. Production
# keeps Django's default; servers and workers a test starts on these settings check the same hashes.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The observer of unprotected routes (receipts/observe.py) writes its notes when a test calls
# observe.flush(): its background thread would write them on a connection of its own, outside
# each test's transaction.
RECEIPTS_OBSERVE_FLUSH_SECONDS = 0
# No default alert rules (idemdash/dashboard/alerts.py:DEFAULT_RULES): a test sees only the
# rules it makes; tests/dashboard/test_alert_rules.py installs them as migrate does.
IDEMDASH_DEFAULT_ALERTS_TO = ""
