"""The outbox message as a kind of unit for operators (idemdash/core/actions.py): send now,
send again and release on one message, send again on every dead message of a filter. The
dashboard and the admin read these; receipts/outbox/store.py does the compare-and-set and
writes the audit entry. The statuses each action applies to are its repair's
(receipts/outbox/store.py:Repair), so the button and the compare-and-set cannot disagree.

Not in receipts/outbox/actions.py: that module is what a message performs (http.post,
email.send), and the store imports it, so it cannot import the store back."""

from __future__ import annotations

from idemdash.core.actions import BulkAction, Kind, OperatorAction
from receipts.outbox import store
from receipts.outbox.models import OutboxMessage

Status = OutboxMessage.Status
REFUSED = (store.InvalidTransition,)

SEND_NOW = OperatorAction(
    "send_now", store.SEND_NOW.allowed, store.send_now, REFUSED,
    explain="The message is due now instead of at its backoff time, with the attempts it has left: "
            "the running drain sends it within seconds.",
    done="Sending {label} now: it is due now. The outcome appears here when it lands.",
)

SEND_AGAIN = OperatorAction(
    "send_again", store.SEND_AGAIN.allowed, store.send_again, REFUSED,
    explain="The dead message gets a fresh set of attempts and is due now: the running drain sends "
            "it within seconds. Its key goes downstream unchanged, so a receiver that honours "
            "Idempotency-Key absorbs a repeat.",
    done="Sending {label} again: a fresh set of attempts, due now. The outcome appears here when it lands.",
)

RELEASE = OperatorAction(
    "release", store.RELEASE.allowed, store.release, REFUSED, danger=True,
    explain="Its drainer's lease has run out: the message goes back to retry, due now. The drainer "
            "may have sent it already; the key lets the receiver absorb the repeat.",
    done="Released {label} from its stuck drainer: it is {status} now, due now.",
)

MESSAGE = Kind(
    "message", OutboxMessage, row_key=lambda message: message.key, label_prefix="message ",
    actions=(SEND_NOW, SEND_AGAIN, RELEASE), lasting=store.lasting_failure, lasting_where=store.lasting_failures,
    bulk=BulkAction(SEND_AGAIN, Status.DEAD, "dead message", "Requeued", store.send_again_many,
                    "outbox_message.send_again",
                    explain="Each message gets a fresh set of attempts and is due now, so the next drain "
                            "sends it; each gets its own audit entry. Its key goes downstream unchanged.",
                    # Requeued is not sent: the summary follows each message to its outcome.
                    settles=(Status.SENT, Status.DEAD)),
)

KINDS = [MESSAGE]
