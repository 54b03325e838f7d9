"""Moved to idemdash.dashboard.vendor; kept for one release, as a host project's
STATICFILES_FINDERS may name idemdash.vendor.PlotlyFinder."""

from idemdash.dashboard.vendor import PlotlyFinder  # noqa: F401
