# Moved to idemdash.core.problems; kept for one release.
from idemdash.core.problems import CONTENT_TYPE, TYPE_PREFIX, problem  # noqa: F401
