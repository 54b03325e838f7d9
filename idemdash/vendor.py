"""Moved to idemdash.dashboard.vendor; kept for one release, as a host project's
STATICFILES_FINDERS may name idemdash.vendor.PlotlyFinder."""

from idemdash.dashboard.vendor import FILES, PACKAGE_DATA, PREFIX, PlotlyFinder  # noqa: F401
