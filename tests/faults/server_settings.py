"""Settings for a gunicorn subprocess in the fault tests: the project's own, served with
the fault tests' URLconf (a decorated test view in front of the project's URLs). Chosen
with DJANGO_SETTINGS_MODULE; never used by pytest itself."""

from idemdash.settings import *  # noqa: F403

ROOT_URLCONF = "tests.faults.urls"
