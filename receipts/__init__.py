"""Receipts: run a side effect once per key. Exports the in-process API (receipts/inprocess.py),
`current()` and the errors, the client distribution's own objects, so one `except` serves a
step over HTTP and in process. What needs the models is imported on first use (PEP 562):
Django imports this package before any model can be."""

from __future__ import annotations

import importlib
from typing import Any

from idemdash_client.context import RunningClaim, current
from idemdash_client.errors import IdempotencyKeyReused, OutcomeUnknown, PreviousFailure, ReceiptCompacted, RequestInProgress, StaleToken

_LAZY = ("run_once", "arun_once", "once", "DEFAULT_SCOPE")  # receipts.inprocess's

__all__ = [
    "RunningClaim",
    "current",
    "RequestInProgress",
    "IdempotencyKeyReused",
    "StaleToken",
    "OutcomeUnknown",
    "PreviousFailure",
    "ReceiptCompacted",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'receipts' has no attribute {name!r}")
    return getattr(importlib.import_module("receipts.inprocess"), name)
