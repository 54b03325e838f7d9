# Moved to receipts.middleware (a host project needs it without the dashboard); this alias
# keeps "idemdash.middleware.DatabaseUnavailableMiddleware" in MIDDLEWARE working for one release.
from receipts.middleware import DatabaseUnavailableMiddleware  # noqa: F401
