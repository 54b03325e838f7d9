"""Webhook endpoints, the events they receive, every delivery of each event, and rejections.

An event is stored once per (endpoint, dedupe key); every delivery of it, the first and
each provider retry, is a WebhookDelivery row, so the dashboard can chart deliveries against
unique events. Processing state lives on the event and moves only by conditional UPDATEs
in `webhooks.processing`.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import models
from django.db.models import Q

from idemdash.core.attempts import DurationHourly
from idemdash_client import references
from idemdash.core.leases import LeasedWork, Scheduled
from idemdash.core.reference_rows import Reference, meta_options
from idemdash.core.rollup import HourlyCount, per_hour


def mask_secret(secret: str) -> str:
    """`whsec_…a1b2`: enough to tell two secrets apart, useless for signing."""
    if not secret:
        return ""
    prefix = secret.split("_", 1)[0] + "_" if "_" in secret[:12] else ""
    tail = secret[-4:] if len(secret) >= 12 else ""
    return f"{prefix}…{tail}"


class WebhookEndpoint(models.Model):
    class Provider(models.TextChoices):
        STRIPE = "stripe"
        SHOPIFY = "shopify"
        STANDARD = "standard", "Standard Webhooks"

    slug = models.SlugField(max_length=64, unique=True, help_text="POST /webhooks/<slug>/")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    paused = models.BooleanField(
        default=False, help_text="Deliveries are still verified and stored, but held until resumed."
    )
    description = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.slug} ({self.provider})"


class WebhookSecret(models.Model):
    """A signing secret. Stored in clear because HMAC needs it; shown only masked.

    An endpoint may have several active secrets at once, so that a provider-side rotation
    (Stripe rolls a secret with an overlap window) loses no delivery.
    """

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="secrets")
    secret = models.CharField(max_length=255)
    active = models.BooleanField(default=True)
    from_env = models.BooleanField(
        default=False, help_text="Kept in step with the *_WEBHOOK_SECRET environment variable."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["endpoint"], condition=Q(from_env=True), name="webhook_secret_one_env_per_endpoint"
            ),
        ]

    @property
    def masked(self) -> str:
        return mask_secret(self.secret)

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"<WebhookSecret {self.pk} {self.masked}>"


class WebhookEvent(LeasedWork, Scheduled):
    class Status(models.TextChoices):
        HELD = "held"  # received while the endpoint was paused
        RECEIVED = "received"
        PROCESSING = "processing"
        RETRY = "retry"
        COMPLETED = "completed"
        IGNORED = "ignored"  # no handler for its type
        DEAD = "dead"  # out of attempts; kept with its traceback

    FINISHED = (Status.COMPLETED, Status.IGNORED, Status.DEAD)
    CLAIMABLE = (Status.RECEIVED, Status.RETRY)

    # No index of its own: webhook_event_dedupe (endpoint, dedupe_key) leads with it. With a
    # second one, PostgreSQL (on statistics taken while an endpoint was new) looked a
    # delivery up by endpoint alone and filtered every event of the endpoint by key.
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.PROTECT, related_name="events", db_index=False)
    provider = models.CharField(max_length=16)
    dedupe_key = models.CharField(max_length=512)
    event_type = models.CharField(max_length=255, blank=True)
    provider_event_id = models.CharField(
        max_length=255, blank=True, help_text="Stripe event id, X-Shopify-Event-Id, or webhook-id."
    )
    account = models.CharField(
        max_length=255, blank=True, help_text="Stripe Connect account or Shopify shop domain."
    )
    payload = models.JSONField()
    payload_sha256 = models.CharField(max_length=64, help_text="sha256 of the canonical JSON payload.")
    payload_mismatch = models.BooleanField(
        default=False, help_text="A redelivery carried a different payload than the stored one."
    )
    status = models.CharField(max_length=16, choices=Status.choices)
    attempts = models.PositiveIntegerField(default=0)
    # A fresh UUID per claim, cleared when nobody owns the event.
    fencing_token = models.UUIDField(null=True, blank=True, help_text="Fences the worker holding the lease.")
    enqueued_at = models.DateTimeField(null=True, blank=True)
    stuck_recoveries = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    # The group of its last failure (idemdash/core/failures.py), cleared when it succeeds.
    failure_signature = models.CharField(max_length=32, blank=True, default="", db_default="", editable=False)
    delivery_count = models.PositiveIntegerField(default=1)
    received_at = models.DateTimeField()
    last_delivery_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "dedupe_key"], name="webhook_event_dedupe"),
        ]
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_event_due"),
            models.Index(fields=["received_at"], name="webhook_event_received"),
            models.Index(fields=["provider", "event_type"], name="webhook_event_type"),
            models.Index(
                fields=["lease_expires_at"],
                name="webhook_event_processing_lease",
                condition=Q(status="processing"),
            ),
            models.Index(fields=["failure_signature"], name="webhook_event_failure",
                         condition=~Q(failure_signature="")),
            # The "dead in this window" tile; without it the count read every event.
            models.Index(fields=["finished_at"], name="webhook_event_dead_finished", condition=Q(status="dead")),
        ]

    def __str__(self) -> str:
        return f"{self.provider} {self.event_type} {self.provider_event_id or self.dedupe_key} ({self.status})"

    def refer(self, kind: str, value: str | int) -> None:
        """In the event's handler: attach a reference to what it works on,
        `event.refer("stripe.charge", charge_id)`. Checked now (InvalidReference); stored
        when this processing attempt completes or fails."""
        running = references.cause()
        if running is None or running.kind != references.WEBHOOK_EVENT or running.id != self.pk:
            raise RuntimeError(f"event.refer() is for the handler of event {self.pk} while it runs.")
        running.references.refer(kind, value)


class EventReference(Reference):
    """What processing the event said it worked on (`event.refer` in its handler), stored
    with the attempt's settle (webhooks/processing.py)."""

    OWNER = "event"

    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="references", db_index=False)

    class Meta:
        constraints, indexes = meta_options("event", "webhook_event_ref")


class WebhookDelivery(models.Model):
    """One HTTP delivery of an event: the first, or a provider retry."""

    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="deliveries")
    received_at = models.DateTimeField()
    delivery_id = models.CharField(max_length=255, blank=True, default="", db_default="",
                                   help_text="The provider's id of this delivery (X-Shopify-Webhook-Id).")
    duplicate = models.BooleanField(default=False)
    payload_matches = models.BooleanField(default=True)
    secret = models.ForeignKey(
        WebhookSecret, null=True, blank=True, on_delete=models.SET_NULL, help_text="The secret that verified it."
    )

    class Meta:
        verbose_name_plural = "webhook deliveries"
        # With the two flags in the index, the window counts and the deliveries chart are
        # index-only scans instead of a heap visit per delivery.
        indexes = [
            models.Index(fields=["received_at", "duplicate", "payload_matches"], name="webhook_delivery_received_kind"),
        ]

    def __str__(self) -> str:
        return f"delivery of {self.event_id} at {self.received_at:%Y-%m-%d %H:%M:%S}"


@dataclass
class Stored:
    """What storing a delivery answered (webhooks/receive.py): the event's id and counters,
    read without its payload."""

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


class WebhookAttempt(models.Model):
    """One run of an event's handler, as the worker settled it: the event keeps only its last
    error, this log keeps every attempt's (as OutboxAttempt does for outbox messages).
    Written in the transaction that settles the attempt (`webhooks.processing`), never on
    the ingest path; deleted with its event by retention."""

    class Outcome(models.TextChoices):
        COMPLETED = "completed"
        IGNORED = "ignored"  # no handler for its type
        RETRY = "retry"  # the handler raised; another attempt is scheduled
        DEAD = "dead"  # the handler raised on the last attempt
        LEASE_LOST = "lease_lost"  # the worker finished after losing its claim; its writes rolled back
        RELEASED = "released"  # stuck past its lease, released by an operator

    # (event, number) serves the detail page; a second index on event alone would only cost
    # each attempt one more write.
    event = models.ForeignKey(WebhookEvent, on_delete=models.CASCADE, related_name="attempt_log", db_index=False)
    number = models.PositiveIntegerField(help_text="Which attempt of the event this was (1 = the first).")
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["event", "number"], name="webhook_attempt_event_number"),
            # The processing-duration roll-up reads a few hours of attempts every minute:
            # with the duration in it, an index-only scan on PostgreSQL.
            models.Index(fields=["finished_at", "duration_ms"], name="webhook_attempt_finished"),
        ]

    def __str__(self) -> str:
        return f"event {self.event_id} #{self.number}: {self.outcome}"


class ProcessingDurationHourly(DurationHourly):
    """How long the handler runs of one UTC hour took, as a histogram: attempts counted by
    bucket of `duration_ms` (idemdash.core.attempts.DURATION_BOUNDS_MS), rolled up from
    the attempt log (`webhooks.rollup`) so that the overview charts p50 and p99 per hour
    after retention has deleted the attempts with their events."""

    Meta = per_hour("processing durations per hour", "bucket")


class DeliveryHourly(HourlyCount):
    """How many deliveries of each kind were stored in one UTC hour: the deliveries rolled
    up (`webhooks.rollup`), so that a dashboard window reads a few dozen rows, not every
    delivery in it. Counts are absolute, recomputed from the deliveries, never incremented;
    an hour keeps its counts when retention later deletes its deliveries with their events."""

    duplicate = models.BooleanField()
    payload_matches = models.BooleanField()

    Meta = per_hour("deliveries per hour", "duplicate", "payload_matches")

    def __str__(self) -> str:
        kind = "redeliveries" if self.duplicate else "first deliveries"
        return f"{self.hour:%Y-%m-%d %H:00} {kind}{'' if self.payload_matches else ' (payload differed)'}: {self.count}"


class RejectedDelivery(models.Model):
    """A delivery that failed verification. Only an excerpt of the body is kept, and the
    table is capped (WEBHOOKS_REJECTED_MAX_ROWS) so a flood cannot fill the disk."""

    class Cause(models.TextChoices):
        MISSING_HEADER = "missing_header"
        MALFORMED_HEADER = "malformed_header"
        STALE_TIMESTAMP = "stale_timestamp"
        FUTURE_TIMESTAMP = "future_timestamp"
        NO_MATCHING_SIGNATURE = "no_matching_signature"
        NO_ACTIVE_SECRET = "no_active_secret"
        INVALID_JSON = "invalid_json"
        MISSING_ID = "missing_id"
        INVALID_ID = "invalid_id"
        UNSTORABLE_PAYLOAD = "unstorable_payload"
        BODY_TOO_LARGE = "body_too_large"

    endpoint = models.ForeignKey(
        WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="rejections"
    )
    provider = models.CharField(max_length=16)
    cause = models.CharField(max_length=32, choices=Cause.choices)
    detail = models.CharField(max_length=500, blank=True)
    body_excerpt = models.CharField(max_length=512, blank=True)
    body_size = models.PositiveIntegerField(default=0)
    remote_addr = models.CharField(max_length=64, blank=True)
    received_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name_plural = "rejected deliveries"

    def __str__(self) -> str:
        return f"{self.provider}: {self.cause}"


class RejectionCount(models.Model):
    """Every rejected delivery ever, per cause: the counter behind /metrics'
    idemdash_webhook_deliveries_rejected_total. Not counted from RejectedDelivery, whose rows
    a flood trims to WEBHOOKS_REJECTED_MAX_ROWS within minutes (before any roll-up could
    count them) and retention deletes: a counter must never go down. Added to by
    `webhooks.receive.record_rejection` in the rejection's own transaction."""

    cause = models.CharField(max_length=32, choices=RejectedDelivery.Cause.choices, unique=True)
    count = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.cause}: {self.count}"
