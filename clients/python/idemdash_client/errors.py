"""Typed errors: every problem type idemdash answers with (docs/http-contract.md, "Problem
types") has its class, so a caller writes `except IdempotencyKeyReused:` instead of comparing URNs.
All are ApiErrors carrying the status, the parsed problem and the Retry-After seconds. The
class names are the TypeScript client's (clients/typescript/src/errors.ts), slug for slug.

The in-process API (receipts.run_once in a Django project) raises these same classes, so
one `except` serves a step whether it runs over HTTP or in process.
"""

from __future__ import annotations

import re
from typing import Any

PROBLEM_PREFIX = "urn:idemdash:problem:"


class IdempotencyError(Exception):
    pass


class ApiError(IdempotencyError):
    """The API answered with a problem (RFC 9457); `problem` is its parsed body and
    `retry_after` the seconds of its Retry-After header (409, 429, 503), else None."""

    def __init__(self, status: int, problem: dict[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.problem = problem
        self.retry_after = retry_after
        super().__init__(f"{status} {problem.get('title', '')}: {problem.get('detail', '')}".strip())

    @property
    def type(self) -> str:
        """The problem's type URI, such as "urn:idemdash:problem:stale-token"."""
        return str(self.problem.get("type", ""))


# One class per problem type, in the order of the table in docs/http-contract.md.
class IdempotencyKeyMissing(ApiError):
    """A decorated view requires the Idempotency-Key header."""


class IdempotencyKeyInvalid(ApiError):
    """The key is not 1 to 255 printable ASCII characters."""


class InvalidJson(ApiError):
    """The body is not JSON, not an object, or holds JSON that cannot be stored."""


class InvalidField(ApiError):
    """A field is missing, unknown or invalid; `problem["field"]` says which."""


class MalformedBody(ApiError):
    """The body's chunked framing is broken; nothing ran."""


class InvalidParameter(ApiError):
    """A NUL character in the path or a query parameter."""


class MalformedRequest(ApiError):
    """The server could not parse the request."""


class Unauthorized(ApiError):
    """No, unknown or revoked bearer token."""


class BadWindow(ApiError):
    """The stats' `window` is not one of 1h, 24h, 7d, 30d."""


class WebhookRejected(ApiError):
    """A webhook delivery failed verification; `problem["cause"]` says why."""


class Forbidden(ApiError):
    """A session without the permission the endpoint needs."""


class WebhookEndpointNotFound(ApiError):
    """No webhook endpoint with that slug."""


class ReceiptNotFound(ApiError):
    """This client has no receipt with that key (`get` answers None for it)."""


class NotFound(ApiError):
    """No API resource at this path."""


class MethodNotAllowed(ApiError):
    """See the Allow header."""


class RequestInProgress(ApiError):
    """Another worker holds the lease on this key; `retry_after` says when to ask again."""

    def __init__(self, status: int, problem: dict[str, Any], retry_after: float | None = None) -> None:
        super().__init__(status, problem, 1 if retry_after is None else retry_after)


class OutcomeUnknown(ApiError):
    """The key's last attempt stopped before it settled and may have had its effect; its
    operation holds such keys (`after_crash: "hold"`) until a reconcile function or an
    operator resolves them. Retrying does not help until then."""


class FreshKeyRetry(ApiError):
    """This caller made the same request under another key within the window, and the
    operation refuses it under a new one (`fresh_key: "refuse"`); nothing ran. `first_key`
    is the key to send it with to get the first attempt's result."""

    @property
    def first_key(self) -> str | None:
        return self.problem.get("first_key")


class ReceiptCompacted(ApiError):
    """The key's operation ran, but compaction dropped its stored response (the operation's
    `compact_after_seconds`); it will not run again. `original_status` is the status it
    answered; look the result up where the operation keeps it."""

    @property
    def original_status(self) -> int | None:
        return self.problem.get("original_status")


class LeaseLost(ApiError):
    """A decorated view outlived its lease and another attempt took over; its writes were
    rolled back."""


class StaleToken(ApiError):
    """Our token no longer owns the receipt (the lease expired and was taken over, an
    operator released it, or it was settled): the result is not stored."""


class LengthRequired(ApiError):
    """A chunked body under a server that does not take it."""


class PayloadTooLarge(ApiError):
    """The body is over the server's limit."""


class UnsupportedMediaType(ApiError):
    """The body must be sent as application/json or a +json type."""


class TooManyBadTokens(ApiError):
    """This address sent too many bad bearer tokens; see `retry_after`."""


class IdempotencyKeyReused(ApiError):
    """The key was used before with a different request (or, in the outbox, another
    message): a bug in how keys are made."""


class InvalidMessage(ApiError):
    """An outbox message its action could never send; `problem["field"]` names the part."""


class UriTooLong(ApiError):
    """The request line is over the server's limit."""


class HeaderFieldsTooLarge(ApiError):
    """Too many headers, or one too long."""


class NotImplementedByServer(ApiError):
    """A transfer coding the server does not know. (The TypeScript client's NotImplemented:
    in Python that name is a builtin constant, which a class must not shadow.)"""

    slug = "not-implemented"


class InternalError(ApiError):
    """Stored for a view that raised; replayed when its operation burns keys."""


class PreviousFailure(ApiError):
    """The key's first attempt failed and its operation burns keys on failure: it is not run
    again. Over HTTP the replay of such a failure that stored no response; from run_once, with
    the key, its stored error and its stored response (`failed`)."""

    key: str | None = None
    error: str = ""
    response: Any = None

    @classmethod
    def failed(cls, key: str, error: str, response: Any) -> PreviousFailure:
        detail = f"{key!r} failed before and is not retried: {error}"
        failure = cls(500, {"type": PROBLEM_PREFIX + "previous-failure", "title": "Previous failure", "detail": detail})
        failure.key, failure.error, failure.response = key, error, response
        return failure


class DatabaseUnavailable(ApiError):
    """The server could not reach its database; nothing was stored. Every call retries it
    (`max_unavailable_retries`) before raising it."""


# Each problem type's slug (after PROBLEM_PREFIX) and its class, named for it (IdempotencyKeyReused
# for idempotency-key-reused) but where `slug` says otherwise: tests/clients/python/test_errors.py
# checks it against the documented table and the TypeScript client's.
PROBLEM_ERRORS: dict[str, type[ApiError]] = {
    error.__dict__.get("slug") or re.sub(r"(?<!^)(?=[A-Z])", "-", error.__name__).lower(): error
    for error in ApiError.__subclasses__()
}


def problem_error(status: int, problem: dict[str, Any], retry_after: float | None = None) -> ApiError:
    """The typed error for a problem answer; a type we do not know (or a body that is not a
    problem, such as a proxy's HTML page) gives a plain ApiError."""
    kind = str(problem.get("type", ""))
    error_class = PROBLEM_ERRORS.get(kind.removeprefix(PROBLEM_PREFIX), ApiError) if kind.startswith(PROBLEM_PREFIX) else ApiError
    return error_class(status, problem, retry_after)

