"""Settings for a gunicorn subprocess of tests/receipts/test_atomic_requests.py: the
project's own with ATOMIC_REQUESTS on, as cookiecutter-django sets it, serving that test's
URLconf. Chosen with DJANGO_SETTINGS_MODULE; never used by pytest itself."""

from idemdash.settings import *  # noqa: F403

DATABASES["default"]["ATOMIC_REQUESTS"] = True  # noqa: F405
ROOT_URLCONF = "tests.receipts.atomic_urls"
