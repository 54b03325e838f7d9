"""idemdash's Python client: run a side effect once per key over idemdash's JSON API, from
sync or async code, without Django (`pip install idemdash-client`; docs/json-api.md).

The `idemdash` distribution depends on this one and reuses it: its in-process API raises
these errors, and `receipts.current()` is `current()` here.

The clients (and httpx under them) are imported on first use (PEP 562), not with the package:
Django imports the receipts app, which imports the errors and current() from here, while it
loads the apps, and has no use for an HTTP client then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from idemdash_client.context import RunningClaim, current
from idemdash_client.errors import (
    ApiError,
    BadWindow,
    DatabaseUnavailable,
    Forbidden,
    HeaderFieldsTooLarge,
    IdempotencyError,
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    RequestInProgress,
    InternalError,
    InvalidField,
    InvalidJson,
    InvalidMessage,
    InvalidParameter,
    IdempotencyKeyReused,
    StaleToken,
    LengthRequired,
    MalformedBody,
    MalformedRequest,
    MethodNotAllowed,
    NotFound,
    NotImplementedByServer,
    FreshKeyRetry,
    OutcomeUnknown,
    ReceiptCompacted,
    PROBLEM_ERRORS,
    PROBLEM_PREFIX,
    PayloadTooLarge,
    ReceiptNotFound,
    PreviousFailure,
    TooManyBadTokens,
    Unauthorized,
    UnsupportedMediaType,
    UriTooLong,
    LeaseLost,
    WebhookEndpointNotFound,
    WebhookRejected,
    problem_error,
)
from idemdash_client.keys import make_key, tool_call_key
from idemdash_client.references import InvalidReference

if TYPE_CHECKING:
    from idemdash_client.aio import AsyncIdempotencyClient
    from idemdash_client.client import Claim, IdempotencyClient

_LAZY = {
    "AsyncIdempotencyClient": "idemdash_client.aio",
    "IdempotencyClient": "idemdash_client.client",
    "Claim": "idemdash_client.client",
}

__all__ = [
    "AsyncIdempotencyClient",
    "IdempotencyClient",
    "Claim",
    "RunningClaim",
    "current",
    "make_key",
    "tool_call_key",
    "InvalidReference",
    "PROBLEM_ERRORS",
    "PROBLEM_PREFIX",
    "problem_error",
    # Every error, one class per problem type (errors.PROBLEM_ERRORS).
    "IdempotencyError",
    "ApiError",
    "IdempotencyKeyMissing",
    "IdempotencyKeyInvalid",
    "InvalidJson",
    "InvalidField",
    "MalformedBody",
    "InvalidParameter",
    "MalformedRequest",
    "Unauthorized",
    "BadWindow",
    "WebhookRejected",
    "Forbidden",
    "WebhookEndpointNotFound",
    "ReceiptNotFound",
    "NotFound",
    "MethodNotAllowed",
    "RequestInProgress",
    "FreshKeyRetry",
    "OutcomeUnknown",
    "ReceiptCompacted",
    "LeaseLost",
    "StaleToken",
    "LengthRequired",
    "PayloadTooLarge",
    "UnsupportedMediaType",
    "TooManyBadTokens",
    "IdempotencyKeyReused",
    "InvalidMessage",
    "UriTooLong",
    "HeaderFieldsTooLarge",
    "NotImplementedByServer",
    "InternalError",
    "DatabaseUnavailable",
    "PreviousFailure",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'idemdash_client' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
