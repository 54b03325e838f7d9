"""Storing deliveries: each event once, every delivery recorded, rejections bounded.

`store_delivery` is the insert-if-absent: it either inserts the event (the unique
(endpoint, dedupe_key) constraint settles a race between two deliveries of one event) or
counts one more delivery on the stored event with a single UPDATE, records the delivery,
and enqueues the event's task (with the ORM broker, in the same commit). On PostgreSQL that
is one statement, outside any transaction (webhooks/pg.py); elsewhere one short transaction
(webhooks/orm.py); path() chooses once per database. The view answers 2xx only after it
has committed.
"""

from __future__ import annotations

from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from idemdash.core import pg as core_pg
from idemdash.core import tracing
from idemdash.core.canonical import fingerprint_json
from idemdash.core.mysql import retry_deadlocks
from webhooks import orm, pg
from webhooks.conf import setting
from webhooks.models import RejectedDelivery, RejectionCount, Stored, WebhookEndpoint, WebhookEvent
from webhooks.verify import VerifiedDelivery

Status = WebhookEvent.Status

EXCERPT_CHARS = 256

# A new event's fields before its first delivery says more (its counters, no lease): the defaults.
NEW_EVENT = {f.attname: f.get_default() for f in WebhookEvent._meta.concrete_fields if not f.primary_key}

# webhooks/pg.py or its plain-ORM twin webhooks/orm.py, chosen once per database.
path = core_pg.choose(pg, orm)


def store_delivery(
    endpoint: WebhookEndpoint,
    verified: VerifiedDelivery,
    secret_id: int | None = None,
    *,
    now: datetime | None = None,
) -> Stored:
    now = now or timezone.now()
    values = {
        **NEW_EVENT,
        "endpoint_id": endpoint.pk,
        "provider": endpoint.provider,
        "dedupe_key": verified.dedupe_key,
        "event_type": verified.event_type[:255],
        "provider_event_id": verified.provider_event_id[:255],
        "account": verified.account[:255],
        "payload": verified.payload,
        "payload_sha256": fingerprint_json(verified.payload),
        "status": Status.HELD if endpoint.paused else Status.RECEIVED,
        "next_attempt_at": now,
        "enqueued_at": None if endpoint.paused else now,
        "received_at": now,
        "last_delivery_at": now,
        "traceparent": tracing.carrier().get("traceparent", ""),
    }
    store = path().store
    for _ in range(3):
        stored = store(values, now, secret_id, verified.delivery_id)
        if stored is not None:
            return stored
        # A concurrent delivery of this event not yet visible to us, or the event purged
        # between our insert and our update: look again.
    raise RuntimeError(f"could not store delivery {verified.dedupe_key!r}")  # pragma: no cover


@retry_deadlocks
def record_rejection(
    endpoint: WebhookEndpoint | None,
    provider: str,
    cause: str,
    detail: str,
    body: bytes,
    *,
    body_size: int | None = None,
    remote_addr: str = "",
    now: datetime | None = None,
) -> RejectedDelivery:
    """Keep a truncated excerpt, never the body, and trim the table to its cap in the same
    transaction, so a flood of bad deliveries costs a bounded amount of disk. Run again when
    MariaDB makes it a deadlock's victim (first rejections of a cause that has no count row
    yet, racing to insert it: `_count_rejection`)."""
    now = now or timezone.now()
    excerpt = body[: EXCERPT_CHARS * 4].decode("utf-8", errors="replace")[:EXCERPT_CHARS]
    excerpt = "".join(ch if ch.isprintable() else " " for ch in excerpt)
    cap = setting("WEBHOOKS_REJECTED_MAX_ROWS")
    with transaction.atomic():
        rejection = RejectedDelivery.objects.create(
            endpoint=endpoint,
            provider=provider,
            cause=cause,
            detail=detail[:500],
            body_excerpt=excerpt,
            body_size=len(body) if body_size is None else body_size,
            remote_addr=remote_addr[:64],
            received_at=now,
        )
        beyond = list(RejectedDelivery.objects.order_by("-id").values_list("id", flat=True)[cap : cap + 1])
        if beyond:
            RejectedDelivery.objects.filter(id__lte=beyond[0]).delete()
        # Last, so the counter's row lock is held only for the commit: rejections of one
        # cause take turns there, which bounds a flood of bad deliveries, not good ones.
        _count_rejection(cause)
    return rejection


def _count_rejection(cause: str) -> None:
    # Every cause's row is made by the migration, so this is one UPDATE; the insert is for a
    # row missing (a cause added since, a table emptied), whose first rejections may race:
    # the unique cause settles it, and on MariaDB record_rejection's deadlock retry.
    counted = RejectionCount.objects.filter(cause=cause)
    if counted.update(count=F("count") + 1):
        return
    try:
        with transaction.atomic():
            RejectionCount.objects.create(cause=cause, count=1)
    except IntegrityError:  # another rejection of the cause created its row first
        counted.update(count=F("count") + 1)
