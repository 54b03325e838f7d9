"""The bench's settings with the devtools' middleware, the observer of unprotected routes
(receipts/observe.py) in its place after authentication: the second server of scenario 14,
which measures the observer's cost against the bench's own settings, where it is left out."""

from idemdash.devtools.bench.settings import *  # noqa: F403
from idemdash.devtools.settings import MIDDLEWARE  # noqa: F401
