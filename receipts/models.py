from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from idemdash.core.attempts import AttemptLog, DurationHourly
from idemdash.core.leases import LeasedWork, is_stuck
from idemdash.core.reference_rows import Reference, meta_options
from idemdash.core.rollup import HourlyCount, per_hour
from receipts.conf import policy_for


class ReceiptRecord(models.Model):
    """What a receipt holds that its archived copy keeps too (ArchivedReceipt.COPIED)."""

    class Status(models.TextChoices):
        PROCESSING = "processing"
        COMPLETED = "completed"
        FAILED = "failed"

    scope = models.CharField(max_length=255, help_text="The principal: API client or user.")
    key = models.CharField(max_length=255)
    operation = models.CharField(max_length=100)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of the canonical request.")
    request = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROCESSING)
    retryable = models.BooleanField(
        default=True, help_text="For a failed receipt: may the next claim run it again?"
    )
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_content_type = models.CharField(max_length=255, blank=True)
    response_body = models.TextField(blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    # None: permanent (`ttl_seconds: None`): never purged, never claimable again.
    expires_at = models.DateTimeField(null=True, blank=True)
    user_id = models.CharField(max_length=255, blank=True)
    session_id = models.CharField(max_length=255, blank=True)
    # When compaction dropped the request and response body; cleared by the key's next life.
    compacted_at = models.DateTimeField(null=True, blank=True, db_default=None)

    class Meta:
        abstract = True


class Receipt(LeasedWork, ReceiptRecord):
    """One intent, identified by (scope, key): the idempotency log's unit."""

    fencing_token = models.PositiveBigIntegerField(default=1)
    updated_at = models.DateTimeField()
    # Set by a caller that waits for this attempt: only then does its settle send a NOTIFY,
    # whose commit takes a lock that serialises every committing NOTIFY on the server.
    waiters = models.BooleanField(default=False, db_default=False, editable=False)
    # The release marker (store.release), cleared by the caller's next claim; the status stays
    # failed and retryable, so every claim path treats it as before.
    released_at = models.DateTimeField(null=True, blank=True)
    # Database defaults too, so that a writer that does not know the marker can still insert.
    released_by = models.CharField(
        max_length=255, blank=True, default="", db_default="", help_text="The operator; empty for the worker."
    )
    release_reason = models.TextField(blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="receipt_scope_key_uniq"),
        ]
        indexes = [
            models.Index(fields=["status", "created_at"], name="receipt_status_age"),
            models.Index(fields=["expires_at"], name="receipt_expiry"),
            models.Index(fields=["operation", "created_at"], name="receipt_operation_age"),
            models.Index(fields=["created_at", "id"], name="receipt_created_id"),
            # The "failed in this window" tile: failed receipts by updated_at, released ones not.
            models.Index(
                fields=["updated_at"], name="receipt_failed_updated", condition=Q(status="failed", released_at=None)
            ),
            # The sweeper and the "stuck" tile only ever ask about processing rows.
            models.Index(
                fields=["lease_expires_at"],
                name="receipt_processing_lease",
                condition=Q(status="processing"),
            ),
            # Compaction's work list, by operation and age; compacted receipts leave it.
            models.Index(
                fields=["operation", "created_at"],
                name="receipt_compactable",
                condition=Q(status="completed", compacted_at=None),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope}/{self.key} ({self.status})"

    @property
    def released(self) -> bool:
        """Given back and not claimed since: the caller's next attempt runs the operation."""
        return self.status == self.Status.FAILED and self.released_at is not None

    @property
    def shown_status(self) -> str:
        """The status an operator reads: "released", "outcome-unknown", or the status."""
        if self.released:
            return "released"
        return "outcome-unknown" if self.outcome_unknown else self.status

    @property
    def outcome_unknown(self) -> bool:
        """Its attempt's lease ran out before it settled, under `after_crash: "hold"`: the next
        attempt is answered outcome-unknown until a reconcile function or an operator resolves
        it. Read as the Stuck board reads a lapsed lease (the claim decides by rules.LAPSED)."""
        held = policy_for(self.operation).after_crash == "hold"
        return held and is_stuck(self, self.Status.PROCESSING, timezone.now())

    @property
    def permanent(self) -> bool:
        """Kept for ever: its operation's `ttl_seconds` was None when it was claimed."""
        return self.expires_at is None


class Attempt(AttemptLog):
    """Every request that touched a key, with what it got (scope, key, operation copied to outlive it)."""

    class Outcome(models.TextChoices):
        CLAIMED = "claimed"
        REPLAYED = "replayed"
        IN_PROGRESS = "in_progress"
        MISMATCH = "mismatch"
        RETRIED_AFTER_FAILURE = "retried_after_failure"
        LEASE_TAKEOVER = "lease_takeover"
        COMPLETED = "completed"
        FAILED = "failed"
        RELEASED = "released"
        STALE_TOKEN = "stale_token"
        # A duplicate that waited for the running first attempt and got its result.
        WAITED = "waited"
        # A claim refused because the attempt before it lapsed under after_crash "hold".
        OUTCOME_UNKNOWN = "outcome_unknown"
        # The same request under a new key, refused: on the receipt of the key it was first made under.
        FRESH_KEY_RETRY = "fresh_key_retry"

    STALE_OUTCOME = Outcome.STALE_TOKEN

    @classmethod
    def record(cls, receipt: Receipt, **fields: Any) -> Attempt:
        """Write a row about `receipt`, copying its scope, key and operation (`fields` may name another key)."""
        return cls.objects.create(
            **{"receipt": receipt, "scope": receipt.scope, "key": receipt.key, "operation": receipt.operation, **fields}
        )

    # Outcomes that are a caller's claim request (the denominator of the duplicate rate).
    CLAIM_OUTCOMES = (
        Outcome.CLAIMED,
        Outcome.REPLAYED,
        Outcome.IN_PROGRESS,
        Outcome.MISMATCH,
        Outcome.RETRIED_AFTER_FAILURE,
        Outcome.LEASE_TAKEOVER,
        Outcome.WAITED,
        Outcome.OUTCOME_UNKNOWN,
        Outcome.FRESH_KEY_RETRY,
    )

    # Claim requests that arrived while the key's first attempt ran: the concurrent duplicates.
    CONCURRENT_OUTCOMES = (Outcome.IN_PROGRESS, Outcome.WAITED)

    # No constraint, so the purge deletes receipts without touching their attempts: the id may
    # dangle (never reused), so read `receipt_id` and look it up, never `attempt.receipt`.
    receipt = models.ForeignKey(
        Receipt,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="attempt_log",
    )
    scope = models.CharField(max_length=255)
    operation = models.CharField(max_length=100)
    outcome = models.CharField(max_length=32, choices=Outcome.choices)
    fencing_token = models.PositiveBigIntegerField(null=True, blank=True)
    fingerprint = models.CharField(max_length=64, blank=True)
    # Only for a mismatch: the rejected request, so the dashboard can diff it.
    request = models.JSONField(null=True, blank=True)
    detail = models.TextField(blank=True)
    actor = models.CharField(max_length=255, blank=True)
    # How long a claim request waited for the running first attempt; None: it did not wait.
    waited_ms = models.PositiveIntegerField(null=True, blank=True)
    # How long a claim request took to decide, less `waited_ms` and never the commit.
    claim_ms = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["outcome", "created_at"], name="attempt_outcome_age"),
            models.Index(fields=["receipt", "created_at"], name="attempt_receipt_age"),
            # Index-only scans for the dashboard's counts by outcome and the claim-duration roll-up.
            models.Index(fields=["created_at", "outcome", "claim_ms"], name="attempt_age_outcome_claim"),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.outcome}"


class AttemptHourly(HourlyCount):
    """Attempts of each outcome in one UTC hour, recomputed from the log, never incremented."""

    outcome = models.CharField(max_length=32, choices=Attempt.Outcome.choices)

    Meta = per_hour("attempts per hour", "outcome")


class ClaimDurationHourly(DurationHourly):
    """Claims of one UTC hour by how long they took: a histogram bucket of `claim_ms`."""

    Meta = per_hour("claim durations per hour", "bucket")


class ArchivedReceipt(ReceiptRecord):
    """A financial receipt kept after its expiry, copied in the transaction that deletes it; a
    key's several lives are told apart by `original_id` and `created_at`."""

    original_id = models.BigIntegerField()
    expires_at = models.DateTimeField()  # only an expiring receipt is purged, so archived
    archived_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [models.Index(fields=["scope", "key"], name="archived_receipt_scope_key")]

    def __str__(self) -> str:
        return f"{self.scope}/{self.key} (archived)"

    COPIED = tuple(f.name for f in ReceiptRecord._meta.fields)


class ReceiptReference(Reference):
    """What an attempt of the receipt said it worked on, stored with its settle."""

    OWNER = "receipt"

    receipt = models.ForeignKey(Receipt, on_delete=models.CASCADE, related_name="references", db_index=False)

    class Meta:
        constraints, indexes = meta_options("receipt", "receipt_ref")


class ObservedRequest(models.Model):
    """A write request to a route no receipt protects, as receipts/observe.py noted it: never
    its body. `skipped` says why it was not fingerprinted (counted, never compared)."""

    method = models.CharField(max_length=8)
    route = models.CharField(max_length=255)
    caller = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, blank=True)
    skipped = models.CharField(max_length=16, blank=True)
    at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["route", "fingerprint", "at"], name="observed_route_fp_at"),
            models.Index(fields=["at"], name="observed_at"),
        ]


class ObservedHourly(HourlyCount):
    """The observer's notes of one UTC hour per route and kind (receipts.rollup.OBSERVED)."""

    method = models.CharField(max_length=8)
    route = models.CharField(max_length=255)
    kind = models.CharField(max_length=16)

    Meta = per_hour("observed requests per hour", "method", "route", "kind")


class FirstKey(models.Model):
    """The key a request was first made under, for an operation that refuses fresh-key retries:
    unique per (scope, operation, fingerprint) digest, so of two copies exactly one inserts it."""

    digest = models.CharField(max_length=64, unique=True)
    receipt_id = models.BigIntegerField()
    key = models.CharField(max_length=255)
    created_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.key} ({self.digest[:12]})"
