"""Moved to idemdash.core.schedules; kept for one release."""

from idemdash.core.schedules import Declared, InstallResult, declared_schedules, install_schedules  # noqa: F401
