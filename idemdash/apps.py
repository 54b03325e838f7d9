"""Moved to idemdash.dashboard.apps; kept for one release, so that a host project whose
INSTALLED_APPS names "idemdash" (the dashboard's entry before it moved) still loads it."""

from idemdash.dashboard.apps import IdemdashConfig  # noqa: F401
