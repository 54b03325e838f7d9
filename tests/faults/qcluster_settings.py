"""Settings for a qcluster subprocess in the fault tests: the project's own, plus this
package as an app, so that its `webhook_handlers` module (a slow, test-only handler) is
imported at start-up like any app's. Chosen with DJANGO_SETTINGS_MODULE; never used by
pytest itself."""

from idemdash.settings import *  # noqa: F403
from idemdash.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.faults"]
