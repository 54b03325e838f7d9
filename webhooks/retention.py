"""What the `purge` command may delete from this app."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet

from idemdash.core.retention import Purger
from webhooks.conf import setting
from webhooks.models import RejectedDelivery, WebhookEvent
from webhooks.rollup import DELIVERIES


def due_events(now: datetime) -> QuerySet[WebhookEvent]:
    """Finished events whose last delivery is older than WEBHOOKS_EVENT_RETENTION_DAYS.

    Counted from the last delivery, not the first: an event that a provider still redelivers
    must stay, or the redelivery would be stored and processed as new. Deleting an event
    deletes its deliveries.
    """
    cutoff = now - timedelta(days=setting("WEBHOOKS_EVENT_RETENTION_DAYS"))
    return WebhookEvent.objects.filter(status__in=WebhookEvent.FINISHED, last_delivery_at__lt=cutoff)


def due_rejections(now: datetime) -> QuerySet[RejectedDelivery]:
    cutoff = now - timedelta(days=setting("WEBHOOKS_REJECTED_RETENTION_DAYS"))
    return RejectedDelivery.objects.filter(received_at__lt=cutoff)


PURGERS = [
    Purger("webhooks.events", due_events),
    Purger("webhooks.rejections", due_rejections),
    # Its own retention, longer than the events': purging events (and their deliveries)
    # leaves the hours they were counted in as they are.
    Purger("webhooks.delivery_rollups", DELIVERIES.expired, archive=DELIVERIES.carry, order_by="hour"),
]
