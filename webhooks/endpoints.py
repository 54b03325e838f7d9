"""Endpoints: the quick-start ones from the environment, pausing and resuming.

The environment endpoints are materialised after `migrate` (post_migrate) and on the first
webhook request of each process, never in AppConfig.ready (no database access at import).
Both paths are race-safe: the slug is unique, and at most one secret per endpoint comes from
the environment (a partial unique constraint).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.signals import setting_changed
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Min
from django.utils import timezone

from idemdash.core import audit
from webhooks.conf import setting
from webhooks.models import WebhookEndpoint, WebhookEvent, WebhookSecret
from webhooks.processing import enqueue_on_commit

log = logging.getLogger(__name__)

ENV_SECRETS = {
    "stripe": "STRIPE_WEBHOOK_SECRET",
    "shopify": "SHOPIFY_WEBHOOK_SECRET",
    "standard": "STANDARD_WEBHOOK_SECRET",
}

_synced = False


def ensure_env_endpoints(using: str = "default") -> list[WebhookEndpoint]:
    """Create /webhooks/<provider>/ for each provider whose secret is set in the environment,
    and keep its environment secret equal to the variable (so rotating the variable and
    restarting rotates the secret; add a second secret in the admin for an overlap)."""
    made = []
    for provider, name in ENV_SECRETS.items():
        secret = setting(name)
        if not secret:
            continue
        endpoint, _ = WebhookEndpoint.objects.using(using).get_or_create(
            slug=provider, defaults={"provider": provider, "description": f"from {name}"}
        )
        if endpoint.provider != provider:
            log.warning("endpoint %r exists for provider %s; %s not applied", provider, endpoint.provider, name)
            continue
        env_secrets = WebhookSecret.objects.using(using).filter(endpoint=endpoint, from_env=True)
        if env_secrets.exclude(secret=secret).update(secret=secret, active=True):
            log.info("endpoint %r: secret replaced from %s", provider, name)
        elif not env_secrets.exists():
            try:
                with transaction.atomic(using=using):
                    WebhookSecret.objects.using(using).create(endpoint=endpoint, secret=secret, from_env=True)
            except IntegrityError:
                pass  # another process created it first
        made.append(endpoint)
    return made


def ensure_env_endpoints_once() -> None:
    global _synced
    if not _synced:
        ensure_env_endpoints()
        _synced = True


def _forget_sync(*, setting: str, **kwargs: Any) -> None:
    global _synced
    if setting in ENV_SECRETS.values():
        _synced = False


setting_changed.connect(_forget_sync)


@functools.cache
def _receiving_sql() -> str:
    q = connection.ops.quote_name
    endpoint, secret = q(WebhookEndpoint._meta.db_table), q(WebhookSecret._meta.db_table)
    return f"""
        SELECT e.id, e.provider, e.paused, s.id, s.secret
        FROM {endpoint} e LEFT JOIN {secret} s ON s.endpoint_id = e.id AND s.active
        WHERE e.slug = %s
        ORDER BY s.created_at DESC, s.id DESC
    """


def receiving(slug: str) -> tuple[WebhookEndpoint, list[tuple[int, str]]] | None:
    """The endpoint a delivery is for and its active secrets, newest first, as (id, secret);
    None for an unknown slug.

    Read afresh for every delivery, in one query, so that a secret deactivated or an
    endpoint paused a moment ago is honoured by the very next delivery in every process.
    The endpoint's other fields are deferred (loaded if anything asks for them)."""
    with connection.cursor() as cursor:
        cursor.execute(_receiving_sql(), [slug])
        rows = cursor.fetchall()
    if not rows:
        return None
    endpoint_id, provider, paused = rows[0][:3]
    endpoint = WebhookEndpoint.from_db(
        connection.alias, ["id", "slug", "provider", "paused"], [endpoint_id, slug, provider, bool(paused)]
    )
    return endpoint, [(secret_id, secret) for *_, secret_id, secret in rows if secret_id is not None]


def pause(endpoint: WebhookEndpoint, *, actor: str, user: Any = None, note: str = "") -> bool:
    """Stop processing: deliveries are still verified, stored (as held) and answered 200,
    and the endpoint's events waiting for a worker (received, or due for a retry) are held
    too. No worker claims an event of a paused endpoint (processing._claim), so one stored
    or enqueued just before the pause waits as well; one already running finishes. False
    (and no audit entry) when it was paused already."""
    with transaction.atomic():
        if WebhookEndpoint.objects.filter(pk=endpoint.pk, paused=False).update(paused=True) != 1:
            return False
        held = WebhookEvent.objects.filter(endpoint=endpoint, status__in=WebhookEvent.CLAIMABLE).update(
            status=WebhookEvent.Status.HELD, enqueued_at=None
        )
        note = audit.cut(note)
        audit.record(actor, "webhook_endpoint.pause", endpoint, "active", "paused",
                     f"{held} waiting events held" + (f"; {note}" if note else ""), user=user)
    endpoint.paused = True
    return True


def resume(endpoint: WebhookEndpoint, *, actor: str, user: Any = None, note: str = "") -> int | None:
    """Resume and release the held events to processing, each handed to a worker. Returns
    how many were released; None (and no audit entry) when it was not paused."""
    now = timezone.now()
    with transaction.atomic():
        if WebhookEndpoint.objects.filter(pk=endpoint.pk, paused=True).update(paused=False) != 1:
            return None
        held = WebhookEvent.objects.filter(endpoint=endpoint, status=WebhookEvent.Status.HELD)
        ids = list(held.values_list("pk", flat=True))
        released = held.filter(pk__in=ids).update(
            status=WebhookEvent.Status.RECEIVED, next_attempt_at=now, enqueued_at=now
        )
        note = audit.cut(note)
        audit.record(actor, "webhook_endpoint.resume", endpoint, "paused", "active",
                     f"{released} held events released" + (f"; {note}" if note else ""), user=user)
        for event_id in ids:
            enqueue_on_commit(event_id)
    endpoint.paused = False
    return released


@dataclass(frozen=True)
class Backlog:
    """What a paused endpoint holds back: its held events and the oldest one's arrival."""

    endpoint: WebhookEndpoint
    held: int
    oldest: datetime | None


def backlog(endpoint: WebhookEndpoint) -> Backlog:
    held = WebhookEvent.objects.filter(endpoint=endpoint, status=WebhookEvent.Status.HELD).aggregate(
        held=Count("id"), oldest=Min("received_at")
    )
    return Backlog(endpoint, held["held"], held["oldest"])
