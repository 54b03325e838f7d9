"""Settings for `make demo`, `make bench` and the test suite: the project's own settings
plus the devtools app (its commands, the demo's webhook handlers, models and admin) and
the demo's URLconf (the project's plus one route of the demo shop), and nothing else, so
the demo runs the production stack.
tests/devtools/test_settings.py holds them to that."""

from idemdash.settings import *  # noqa: F403
from idemdash.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "idemdash.devtools"]
# The project's routes and the demo shop's refund route, which nothing protects on purpose.
ROOT_URLCONF = "idemdash.devtools.urls"
