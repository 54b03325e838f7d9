"""Receipts: run a side effect once per key.

The in-process API is exported here: `receipts.run_once`, `receipts.arun_once`,
`receipts.once` (receipts/inprocess.py), `receipts.current()` and the errors they share with
the HTTP clients. current() and the errors are the client distribution's own objects
(idemdash_client.context, idemdash_client.errors): one `except IdempotencyKeyReused` serves a step
over HTTP and in process, and current() sees a claim whichever front door made it. The ones
that need the models are imported on first use (PEP 562), not with the package: Django
imports this package while it loads the apps, before any model can be.
"""

from __future__ import annotations

import importlib
from typing import Any

from idemdash_client.context import RunningClaim, current
from idemdash_client.errors import IdempotencyKeyReused, OutcomeUnknown, PreviousFailure, ReceiptCompacted, RequestInProgress, StaleToken

_LAZY = {
    "run_once": "receipts.inprocess",
    "arun_once": "receipts.inprocess",
    "once": "receipts.inprocess",
    "DEFAULT_SCOPE": "receipts.inprocess",
}

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
    return getattr(importlib.import_module(_LAZY[name]), name)
