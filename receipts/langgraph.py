"""What LangGraph's RetryPolicy should retry in a node whose effect runs under a claim:

    builder.add_node("send_email", send_email, retry_policy=RetryPolicy(retry_on=receipts.langgraph.retry_on))

A node that makes its effect with receipts.run_once (or the HTTP client's run_once) can be
re-run safely: the repeat replays the stored result, or runs the step again under the same
downstream key, which the provider absorbs. So a timeout is worth retrying there, though
LangGraph's default refuses every OSError, TimeoutError included.

Imports neither LangGraph nor Django: LangGraph's default is looked up when it is needed."""

from __future__ import annotations

from idemdash_client import errors

NEVER_RETRIED = (errors.IdempotencyKeyReused, errors.PreviousFailure, errors.OutcomeUnknown)


def retry_on(exc: BaseException) -> bool:
    """True when LangGraph should run the node again after `exc`.

    What no retry can fix is refused (NEVER_RETRIED): the key was used for another request
    (IdempotencyKeyReused: a bug in how keys are made), the key's first attempt failed and its
    operation burns keys (PreviousFailure), and an attempt whose outcome is unknown
    (OutcomeUnknown: after_crash "hold") waits for a reconcile or an operator. A key another
    attempt is still running (RequestInProgress) and a lease lost to another attempt (StaleToken) are
    retried: the next attempt waits for, or replays, that attempt's result. Everything else
    is LangGraph's default."""
    if isinstance(exc, NEVER_RETRIED):
        return False
    if isinstance(exc, (errors.RequestInProgress, errors.StaleToken, TimeoutError)):
        return True
    if isinstance(exc, errors.ApiError):
        # Any other problem the JSON API answered: the server's trouble is worth another
        # try, the request's is not.
        return exc.status >= 500
    from langgraph.types import RetryPolicy

    return bool(RetryPolicy().retry_on(exc))
