"""A slow handler for the qcluster fault test, imported only in a qcluster subprocess that
runs with tests.faults.qcluster_settings.

Each run appends a line to the run log (a file, outside any transaction, so a killed run
still shows), sleeps, then writes its effect, an AuditEntry row, in the transaction that
completes the event. The effect rows have no unique constraint: if a killed or fenced-out
run ever committed its effect, the test would count two.
"""

from __future__ import annotations

import os
import time

from django.utils import timezone

from idemdash.core.models import AuditEntry
from webhooks.handlers import webhook_handler
from webhooks.models import WebhookEvent

EFFECT_ACTION = "faults.webhook_effect"


@webhook_handler("stripe", "fault.slow")
def slow_effect(event: WebhookEvent) -> None:
    with open(os.environ["FAULT_RUN_LOG"], "a") as log:
        log.write(f"{event.pk} {os.getpid()}\n")
    time.sleep(float(os.environ.get("FAULT_HANDLER_SECONDS", "2")))
    AuditEntry.objects.create(
        created_at=timezone.now(), actor="fault-handler", action=EFFECT_ACTION, object_type="webhook_event",
        object_id=str(event.pk),
    )
