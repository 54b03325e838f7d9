"""The receipt as a kind of unit for operators (idemdash/core/actions.py): its one action,
release, on one receipt and on every failed receipt of a filter. The dashboard and the admin
read these; receipts/store.py:release does the compare-and-set and writes the audit entry."""

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
    "release", (Status.FAILED, Status.PROCESSING), store.release, (store.StaleToken, store.NotReleasable),
    explain="The key is given back: the caller's next attempt with this key runs the operation "
            "again (even for an operation that burns its key on failure). Your reason goes to the "
            "audit log and to the release marker; a failed receipt keeps the error it failed with.",
    done="Released {label}: the caller's next attempt will run.", caution=_release_caution,
)

RECEIPT = Kind(
    "receipt", Receipt, row_key=lambda receipt: receipt.key, actions=(RELEASE,),
    bulk=BulkAction(RELEASE, Status.FAILED, "failed receipt", "Released", store.release_many, "receipt.release",
                    explain="Each key is given back, one by one, so that its caller's next attempt runs the "
                            "operation again; each keeps its error and gets its own audit entry."),
)

KINDS = [RECEIPT]
