"""Storing deliveries: each event once, every delivery recorded, rejections bounded.

`store_delivery` is the insert-if-absent: one short transaction that either inserts the
event (the unique (endpoint, dedupe_key) constraint settles a race between two deliveries of
one event) or counts one more delivery on the stored event with a single UPDATE, records
the delivery, and (with the ORM broker) enqueues the event's task. On PostgreSQL that is
one statement, outside any transaction (webhooks/fastpath.py). The view answers 2xx only
after it has committed.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, When
from django.utils import timezone

from receipts.fingerprint import fingerprint_json
from webhooks import fastpath
from webhooks.conf import setting
from webhooks.models import RejectedDelivery, WebhookDelivery, WebhookEndpoint, WebhookEvent
from webhooks.processing import delivery_task, enqueue_on_commit
from webhooks.verify import VerifiedDelivery

Status = WebhookEvent.Status

EXCERPT_CHARS = 256


@dataclass
class Stored:
    event_id: int
    status: str
    delivery_count: int
    created: bool
    payload_matches: bool = True
    _event: WebhookEvent | None = None

    @property
    def event(self) -> WebhookEvent:
        """The stored event, read on first use (answering the delivery does not need it)."""
        if self._event is None:
            self._event = WebhookEvent.objects.get(pk=self.event_id)
        return self._event


def store_delivery(
    endpoint: WebhookEndpoint,
    verified: VerifiedDelivery,
    secret_id: int | None = None,
    *,
    now: datetime | None = None,
) -> Stored:
    now = now or timezone.now()
    values = {
        "endpoint_id": endpoint.pk,
        "provider": endpoint.provider,
        "dedupe_key": verified.dedupe_key,
        "event_type": verified.event_type[:255],
        "provider_event_id": verified.provider_event_id[:255],
        "account": verified.account[:255],
        "payload": verified.payload,
        "payload_sha256": fingerprint_json(verified.payload),
        "payload_mismatch": False,
        "status": Status.HELD if endpoint.paused else Status.RECEIVED,
        "attempts": 0,
        "next_attempt_at": now,
        "lease_expires_at": None,
        "fencing_token": None,
        "enqueued_at": None if endpoint.paused else now,
        "stuck_recoveries": 0,
        "last_error": "",
        "delivery_count": 1,
        "received_at": now,
        "last_delivery_at": now,
        "finished_at": None,
    }
    fast = fastpath.usable()
    task = delivery_task(endpoint.pk, verified.dedupe_key) if fast and not endpoint.paused else None
    for _ in range(3):
        with _atomic(fast):
            stored = _store_fast(values, now, secret_id, task) if fast else _store_orm(values, now, secret_id)
            if stored is None:
                continue  # a concurrent delivery of this event, not yet visible to us: look again
            if stored.created and stored.status == Status.RECEIVED and task is None:
                enqueue_on_commit(stored.event_id)
            return stored
    raise RuntimeError(f"could not store delivery {verified.dedupe_key!r}")  # pragma: no cover


def _atomic(fast: bool) -> Any:
    """The fast path is one statement, atomic on its own and holding its task (unless `task`
    is None: another broker, told after the commit, or a held event), so it runs without a
    transaction of ours. Inside a caller's transaction it still gets a savepoint, so that a
    payload the database refuses leaves that transaction usable."""
    if fast and not transaction.get_connection().in_atomic_block:
        return nullcontext()
    return transaction.atomic()


def _store_fast(values: dict, now: datetime, secret_id: int | None, task: tuple[str, str] | None) -> Stored | None:
    found = fastpath.store(values, now, secret_id, task)
    if found is None:
        return None
    created, event_id, status, deliveries, matches = found
    event = WebhookEvent(id=event_id, **values) if created else None
    return Stored(event_id, status, deliveries, created, matches, event)


def _store_orm(values: dict, now: datetime, secret_id: int | None) -> Stored | None:
    try:
        with transaction.atomic():  # a savepoint: the duplicate path goes on after it
            event = WebhookEvent.objects.create(**values)
    except IntegrityError:
        pass
    else:
        WebhookDelivery.objects.create(event=event, received_at=now, secret_id=secret_id)
        return Stored(event.pk, event.status, event.delivery_count, True, _event=event)

    digest = values["payload_sha256"]
    stored = WebhookEvent.objects.filter(endpoint_id=values["endpoint_id"], dedupe_key=values["dedupe_key"])
    counted = stored.update(
        delivery_count=F("delivery_count") + 1,
        last_delivery_at=now,
        payload_mismatch=Case(When(~Q(payload_sha256=digest), then=True), default=F("payload_mismatch")),
    )
    if counted != 1:
        return None  # purged between our insert and our update: insert again
    # Our UPDATE holds the row until commit, so this read sees our count. The payload
    # (up to a megabyte) is not read back: a duplicate is answered from the counters.
    event_id, status, deliveries, sha = stored.values_list("id", "status", "delivery_count", "payload_sha256").get()
    matches = sha == digest
    WebhookDelivery.objects.create(
        event_id=event_id, received_at=now, duplicate=True, payload_matches=matches, secret_id=secret_id
    )
    return Stored(event_id, status, deliveries, False, matches)


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
    transaction, so a flood of bad deliveries costs a bounded amount of disk."""
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
    return rejection
