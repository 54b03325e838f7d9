"""What LangGraph's RetryPolicy should retry in a node whose effect runs under a claim, which
is safe to re-run (so a timeout is worth retrying, though LangGraph's default refuses it).
Imports neither LangGraph nor Django until LangGraph's default is needed.

    builder.add_node("send_email", send_email, retry_policy=RetryPolicy(retry_on=receipts.langgraph.retry_on))"""

from __future__ import annotations

from idemdash_client import errors

NEVER_RETRIED = (errors.IdempotencyKeyReused, errors.PreviousFailure, errors.OutcomeUnknown)


def retry_on(exc: BaseException) -> bool:
    """True when LangGraph should run the node again after `exc`: never for what no retry can
    fix (NEVER_RETRIED); always for a key in progress or a lease lost, whose next attempt
    waits for or replays the other's result; else LangGraph's default."""
    if isinstance(exc, NEVER_RETRIED):
        return False
    if isinstance(exc, (errors.RequestInProgress, errors.StaleToken, TimeoutError)):
        return True
    if isinstance(exc, errors.ApiError):
        return exc.status >= 500
    from langgraph.types import RetryPolicy

    return bool(RetryPolicy().retry_on(exc))
