# Moved to idemdash.core.bulk; kept for one release.
from idemdash.core.bulk import BULK_LIMIT, BulkResult, each  # noqa: F401
