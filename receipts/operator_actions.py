"""The receipt as a kind of unit for operators (idemdash/core/actions.py): release, one or in
bulk, and an outcome-unknown receipt's two repairs, mark completed and run again."""

from __future__ import annotations

from django.utils import timezone

from idemdash.core.actions import BulkAction, Kind, OperatorAction
from receipts import store
from receipts.models import Receipt

Status = Receipt.Status


def _release_caution(receipt: Receipt) -> str:
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
    done="Released {label}: the caller's next attempt will run.", caution=_release_caution,
)

OUTCOME_UNKNOWN = "outcome-unknown"  # Receipt.shown_status of a held receipt

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
)

RECEIPT = Kind(
    "receipt", Receipt, row_key=lambda receipt: receipt.key, actions=(RELEASE, MARK_COMPLETED, RUN_AGAIN),
    lasting=store.lasting_failure, lasting_where=store.lasting_failures,
    bulk=BulkAction(RELEASE, Status.FAILED, "failed receipt", "Released", store.release_many, "receipt.release",
                    explain="Each key is given back, one by one, so that its caller's next attempt runs the "
                            "operation again; each keeps its error and gets its own audit entry."),
)

KINDS = [RECEIPT]
