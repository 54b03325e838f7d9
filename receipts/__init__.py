"""Receipts: run a side effect once per key.

The in-process API is exported here: `receipts.run_once`, `receipts.arun_once`,
`receipts.once` (receipts/inprocess.py), `receipts.current()` (receipts/context.py) and the
errors they share with the HTTP client (receipts/client.py). The ones that need the models
are imported on first use (PEP 562), not with the package: Django imports this package
while it loads the apps, before any model can be, and the HTTP client imports it in
workers that have no Django at all.
"""

from __future__ import annotations

import importlib
from typing import Any

from receipts.context import RunningClaim, current

_LAZY = {
    "run_once": "receipts.inprocess",
    "arun_once": "receipts.inprocess",
    "once": "receipts.inprocess",
    "DEFAULT_SCOPE": "receipts.inprocess",
    "InProgress": "receipts.client",
    "KeyMismatch": "receipts.client",
    "LeaseLost": "receipts.client",
    "OutcomeUnknown": "receipts.client",
    "PreviousFailure": "receipts.client",
}

__all__ = ["RunningClaim", "current", *_LAZY]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'receipts' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
