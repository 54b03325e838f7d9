"""Settings for a uvicorn subprocess (tests/receipts/test_asgi_live.py): the project's own,
served with each kind of view of tests/receipts/view_kinds_urls.py in front of the project's
URLs. Chosen with DJANGO_SETTINGS_MODULE; never used by pytest itself."""

from idemdash.settings import *  # noqa: F403

ROOT_URLCONF = "tests.receipts.asgi_urls"
