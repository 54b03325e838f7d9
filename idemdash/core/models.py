"""The concrete models every app shares, each in the module of its logic; listed here so that
Django loads them with the app, whichever of our other apps a project installs."""

from idemdash.core.audit import AuditEntry
from idemdash.core.bulk_runs import BulkItem, BulkRun
from idemdash.core.clients import ApiClient
from idemdash.core.failures import FailureGroup
from idemdash.core.rollup import Rollup

__all__ = ["ApiClient", "AuditEntry", "BulkItem", "BulkRun", "FailureGroup", "Rollup"]
