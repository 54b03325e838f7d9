"""The receipt as a kind of unit for operators (idemdash/core/actions.py): release, one or in
bulk, and an outcome-unknown receipt's two repairs, mark completed and run again."""

from __future__ import annotations

import re

from django.utils import timezone

from idemdash.core.actions import BulkAction, Kind, OperatorAction
from receipts import store
from receipts.conf import policy_for
from receipts.downstream import downstream_key
from receipts.models import Receipt

Status = Receipt.Status
OUTCOME_UNKNOWN = "outcome-unknown"  # Receipt.shown_status of a held receipt

# A failure after which the effect may still have happened: the request went out and no
# answer came back (a timeout, a dropped connection, a gateway's 504), read from the stored
# "Type: message". A word that merely contains one errs towards the red confirmation.
AMBIGUOUS_ERROR = re.compile(
    r"\bHTTP 504\b|time[ds]?[ _-]?out|connection[ _-]?(reset|aborted|closed|lost|error)|broken pipe|"
    r"(remote|server)[ _-]?(end[ _-])?(closed|disconnected)|\beof\b",
    re.IGNORECASE,
)
ERROR_TYPE = re.compile(r"[A-Za-z_][\w.]{0,99}(?=: )")  # an exception's name, safe to show as it is


def unknown_outcome(receipt: Receipt) -> str:
    """How the receipt's last attempt may have had its effect though nothing says so ("" when
    its outcome is known): it stopped before it settled, or it failed as a timeout fails."""
    if receipt.shown_status == OUTCOME_UNKNOWN:
        return "stopped before it settled (its lease ran out)"
    if receipt.status == Status.PROCESSING:
        return "has not settled: it may be running, or its worker may have died after the effect"
    if receipt.status == Status.FAILED and not receipt.released and AMBIGUOUS_ERROR.search(receipt.error):
        named = ERROR_TYPE.match(receipt.error)
        return f"failed with {named.group() if named else 'an error'} after the request may have gone out"
    return ""


def _risky(receipt: Receipt) -> str:
    """What makes running it twice costly ("" for an operation one more run does not hurt)."""
    policy = policy_for(receipt.operation)
    if policy.financial:
        return "financial"
    return "irreversible (its policy holds it after a crash)" if policy.after_crash == "hold" else ""


def _twice_caution(receipt: Receipt, verb: str) -> str:
    """The red warning before giving back a key whose effect may have happened, naming where to
    look first; "" when its outcome is known or a second run is harmless."""
    why, risky = unknown_outcome(receipt), _risky(receipt)
    if not (why and risky):
        return ""
    key = downstream_key(receipt.scope, receipt.key, receipt.created_at)
    return (f"{receipt.operation} is {risky} and its last attempt {why}: the effect may have happened. "
            f"Before you {verb}, look up the downstream key {key} at the provider. If the effect is "
            f"there, the caller's next attempt makes it happen twice.")


def _release_caution(receipt: Receipt) -> str:
    return _twice_caution(receipt, "release it")


def _release_note(receipt: Receipt) -> str:
    if receipt.status != Status.PROCESSING:
        return ""
    text = ("It is processing: its lease is revoked and its fencing token bumped, so the worker "
            "holding it can no longer store a result.")
    if receipt.lease_expires_at and receipt.lease_expires_at > timezone.now():
        text += " Its lease has not expired: a worker may still be running it. Its result will be refused."
    return text


RELEASE = OperatorAction(
    "release", (Status.FAILED, Status.PROCESSING, "outcome-unknown"), store.release, (store.StaleToken, store.NotReleasable),
    explain="The key is given back: the caller's next attempt with this key runs the operation "
            "again (even for an operation that burns its key on failure). Your reason goes to the "
            "audit log and to the release marker; a failed receipt keeps the error it failed with.",
    done="Released {label}: the caller's next attempt will run.", caution=_release_caution, note=_release_note,
)

MARK_COMPLETED = OperatorAction(
    "mark_completed", (OUTCOME_UNKNOWN,), store.mark_completed, (store.StaleToken, store.NotHeld, store.InvalidResult),
    explain="Its attempt stopped before it settled. If the provider shows that the effect happened "
            "(look it up by the downstream key), store the result it gave: every later attempt with "
            "this key replays it and nothing runs again.",
    done="Marked {label} completed: later attempts replay the result.",
    input="Result (JSON, replayed to the caller)",
)

RUN_AGAIN = OperatorAction(
    "run_again", (OUTCOME_UNKNOWN,), store.run_again, (store.StaleToken, store.NotHeld, store.NotReleasable),
    explain="Its attempt stopped before it settled. If the provider has no trace of the effect, give "
            "the key back: the caller's next attempt runs the operation again. If the effect did "
            "happen, it will happen twice.",
    done="{label} will run again: the caller's next attempt runs the operation.", danger=True,
    caution=lambda receipt: _twice_caution(receipt, "run it again"),
)

RECEIPT = Kind(
    "receipt", Receipt, row_key=lambda receipt: receipt.key, actions=(RELEASE, MARK_COMPLETED, RUN_AGAIN),
    lasting=store.lasting_failure, lasting_where=store.lasting_failures,
    bulk=BulkAction(RELEASE, Status.FAILED, "failed receipt", "Released", store.release_many, "receipt.release",
                    explain="Each key is given back, one by one, so that its caller's next attempt runs the "
                            "operation again; each keeps its error and gets its own audit entry."),
)

KINDS = [RECEIPT]
