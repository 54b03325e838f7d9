"""A delivery stored through the plain ORM: the twin of webhooks/pg.py, with the same
function, for SQLite, MySQL/MariaDB and PostgreSQL through psycopg2 (receive.path()
chooses)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, When

from webhooks.models import Stored, WebhookDelivery, WebhookEvent
from webhooks.processing import enqueue_on_commit


def store(values: dict[str, Any], now: datetime, secret_id: int | None, delivery_id: str) -> Stored | None:
    """Store one delivery of the event described by `values` (every WebhookEvent field but
    id) in one short transaction, with the event's task if the event is new and not held
    (in the transaction itself with the ORM broker). None when the event was purged between
    our insert and our update: the caller stores it again."""
    with transaction.atomic():
        try:
            with transaction.atomic():  # a savepoint: the duplicate path goes on after it
                event = WebhookEvent.objects.create(**values)
        except IntegrityError:
            pass
        else:
            WebhookDelivery.objects.create(event=event, received_at=now, secret_id=secret_id, delivery_id=delivery_id)
            if event.status == WebhookEvent.Status.RECEIVED:
                enqueue_on_commit(event.pk)
            return Stored(event.pk, event.status, event.delivery_count, True, _event=event)

        digest = values["payload_sha256"]
        stored = WebhookEvent.objects.filter(endpoint_id=values["endpoint_id"], dedupe_key=values["dedupe_key"])
        counted = stored.update(
            delivery_count=F("delivery_count") + 1,
            last_delivery_at=now,
            payload_mismatch=Case(When(~Q(payload_sha256=digest), then=True), default=F("payload_mismatch")),
        )
        if counted != 1:
            return None
        # Our UPDATE holds the row until commit, so this read sees our count. The payload
        # (up to a megabyte) is not read back: a duplicate is answered from the counters.
        event_id, status, deliveries, sha = stored.values_list("id", "status", "delivery_count", "payload_sha256").get()
        matches = sha == digest
        WebhookDelivery.objects.create(
            event_id=event_id, received_at=now, duplicate=True, payload_matches=matches, secret_id=secret_id,
            delivery_id=delivery_id,
        )
        return Stored(event_id, status, deliveries, False, matches)
