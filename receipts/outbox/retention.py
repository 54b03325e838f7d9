"""What retention may delete from the outbox (see receipts/retention.py)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import QuerySet

from idemdash.core.retention import Purger
from receipts.outbox.conf import setting
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from receipts.outbox.rollup import ATTEMPTS, ENQUEUED


def due_sent(now: datetime) -> QuerySet:
    days = setting("OUTBOX_SENT_RETENTION_DAYS")
    return OutboxMessage.objects.filter(status=OutboxMessage.Status.SENT, sent_at__lt=now - timedelta(days=days))


def due_dead(now: datetime) -> QuerySet:
    days = setting("OUTBOX_DEAD_RETENTION_DAYS")
    return OutboxMessage.objects.filter(status=OutboxMessage.Status.DEAD, updated_at__lt=now - timedelta(days=days))


def due_attempts(now: datetime) -> QuerySet:
    days = setting("OUTBOX_ATTEMPT_RETENTION_DAYS")
    return OutboxAttempt.objects.filter(created_at__lt=now - timedelta(days=days))


PURGERS = [
    Purger("outbox.sent", due_sent),
    Purger("outbox.dead", due_dead),
    Purger("outbox.attempts", due_attempts),
    # Their own retention, longer than the messages' and attempts': purging those leaves the
    # hours they were counted in as they are.
    Purger("outbox.message_rollups", ENQUEUED.expired, archive=ENQUEUED.carry, order_by="hour"),
    Purger("outbox.attempt_rollups", ATTEMPTS.expired, archive=ATTEMPTS.carry, order_by="hour"),
]
