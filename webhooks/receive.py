"""Storing deliveries: each event once, every delivery recorded, rejections bounded.

`store_delivery` is the insert-if-absent: one short transaction that either inserts the
event (the unique (endpoint, dedupe_key) constraint settles a race between two deliveries of
one event) or counts one more delivery on the stored event with a single UPDATE. The view
answers 2xx only after this transaction has committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, When
from django.utils import timezone

from receipts.fingerprint import fingerprint_json
from webhooks.models import RejectedDelivery, WebhookDelivery, WebhookEndpoint, WebhookEvent
from webhooks.processing import enqueue_on_commit
from webhooks.verify import VerifiedDelivery

Status = WebhookEvent.Status

EXCERPT_CHARS = 256


@dataclass
class Stored:
    event: WebhookEvent
    created: bool
    payload_matches: bool = True


def store_delivery(
    endpoint: WebhookEndpoint,
    verified: VerifiedDelivery,
    secret_id: int | None = None,
    *,
    now: datetime | None = None,
) -> Stored:
    now = now or timezone.now()
    digest = fingerprint_json(verified.payload)
    for _ in range(3):
        with transaction.atomic():
            try:
                with transaction.atomic():  # a savepoint: the duplicate path goes on after it
                    event = WebhookEvent.objects.create(
                        endpoint=endpoint,
                        provider=endpoint.provider,
                        dedupe_key=verified.dedupe_key,
                        event_type=verified.event_type[:255],
                        provider_event_id=verified.provider_event_id[:255],
                        account=verified.account[:255],
                        payload=verified.payload,
                        payload_sha256=digest,
                        status=Status.HELD if endpoint.paused else Status.RECEIVED,
                        next_attempt_at=now,
                        enqueued_at=None if endpoint.paused else now,
                        received_at=now,
                        last_delivery_at=now,
                    )
            except IntegrityError:
                pass
            else:
                WebhookDelivery.objects.create(event=event, received_at=now, secret_id=secret_id)
                if event.status == Status.RECEIVED:
                    enqueue_on_commit(event.pk)
                return Stored(event, created=True)

            stored = WebhookEvent.objects.filter(endpoint=endpoint, dedupe_key=verified.dedupe_key)
            counted = stored.update(
                delivery_count=F("delivery_count") + 1,
                last_delivery_at=now,
                payload_mismatch=Case(When(~Q(payload_sha256=digest), then=True), default=F("payload_mismatch")),
            )
            if counted != 1:
                continue  # purged between our insert and our update: insert again
            # Our UPDATE holds the row until commit, so this read sees our count. The payload
            # (up to a megabyte) is not read back: a duplicate is answered from the counters.
            event = stored.defer("payload").get()
            matches = event.payload_sha256 == digest
            WebhookDelivery.objects.create(
                event=event, received_at=now, duplicate=True, payload_matches=matches, secret_id=secret_id
            )
            return Stored(event, created=False, payload_matches=matches)
    raise RuntimeError(f"could not store delivery {verified.dedupe_key!r}")  # pragma: no cover


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
    cap = settings.WEBHOOKS_REJECTED_MAX_ROWS
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
