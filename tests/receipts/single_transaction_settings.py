"""Settings for a gunicorn subprocess of tests/receipts/test_single_transaction.py: the
project's own, serving that test's single-transaction views. Chosen with
DJANGO_SETTINGS_MODULE; never used by pytest itself."""

from idemdash.settings import *  # noqa: F403

ROOT_URLCONF = "tests.receipts.single_transaction_urls"
