"""The webhook event as a kind of unit for operators (idemdash/core/actions.py): reprocess and
release on one event, reprocess on every dead event of a filter. The dashboard and the admin
read these; webhooks/processing.py does the compare-and-set and writes the audit entry."""

from __future__ import annotations

from idemdash.core.actions import BulkAction, Kind, OperatorAction
from webhooks import processing
from webhooks.models import WebhookEvent

Status = WebhookEvent.Status

REPROCESS = OperatorAction(
    "reprocess", (Status.RECEIVED, Status.RETRY, Status.COMPLETED, Status.IGNORED, Status.DEAD),
    processing.reprocess, (processing.NotReprocessable,),
    explain="The event goes back to received with a fresh attempt budget and is handed to a worker "
            "now. Its handler runs again, so it must be idempotent on the provider's object id.",
    done="Reprocessing {label}: it is {status} and handed to a worker now. The outcome appears here when it lands.",
)

RELEASE = OperatorAction(
    "release", (Status.PROCESSING,), processing.release, (processing.NotStuck,), danger=True,
    explain="Its worker's lease has run out: the event goes back to retry and is handed to a worker "
            "now (or dead, if it has used every attempt). The worker that held it can no longer "
            "complete it.",
    done="Released {label} from its stuck worker: it is {status} now.",
)

EVENT = Kind(
    "event", WebhookEvent, row_key=lambda event: event.provider_event_id or event.dedupe_key,
    label_prefix="event ", related=("endpoint",), actions=(REPROCESS, RELEASE),
    lasting=processing.lasting_failure, lasting_where=processing.lasting_failures,
    bulk=BulkAction(REPROCESS, Status.DEAD, "dead event", "Requeued", processing.reprocess_many,
                    "webhook_event.reprocess",
                    explain="Each event gets a fresh attempt budget and is handed to a worker now; each gets "
                            "its own audit entry. Handlers run again, so they must be idempotent.",
                    settles=WebhookEvent.FINISHED),
)

KINDS = [EVENT]
