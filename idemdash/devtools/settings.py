"""Settings for `make demo`, `make bench` and the test suite: the project's own settings
plus the devtools app (its commands, the demo's webhook handlers, models and admin),
and nothing else, so the demo runs the production stack.
tests/devtools/test_settings.py holds them to that."""

from idemdash.settings import *  # noqa: F403
from idemdash.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "idemdash.devtools"]
