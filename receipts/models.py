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



class Receipt(LeasedWork):
    """One intent, identified by (scope, key): the idempotency log's unit."""

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
    fencing_token = models.PositiveBigIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    # None: permanent (an operation with `ttl_seconds: None`, a once-ever step): never
    # purged and never claimable again (receipts/rules.py: LIVE, EXPIRED).
    expires_at = models.DateTimeField(null=True, blank=True)
    user_id = models.CharField(max_length=255, blank=True)
    session_id = models.CharField(max_length=255, blank=True)
    # Set by a caller that waits for this attempt (Prefer: wait): only then does settling
    # it send a NOTIFY, whose commit takes a lock that serialises every committing
    # NOTIFY on the server (receipts/waiting.py).
    waiters = models.BooleanField(default=False, db_default=False, editable=False)
    # The release marker: set when the key is given back (store.release) and cleared by the
    # caller's next claim, so a failed receipt with a marker is "released: the next attempt
    # will run". The status stays failed and retryable, which is what lets the claim paths
    # treat it exactly as before, and the replay rule never replays a marked failed receipt
    # (receipts/rules.py); `error` keeps the failure.
    released_at = models.DateTimeField(null=True, blank=True)
    # Database defaults too, so that a writer that does not know the marker (a raw INSERT,
    # an older release during a rolling deploy) can still insert receipts.
    released_by = models.CharField(
        max_length=255, blank=True, default="", db_default="", help_text="The operator; empty for the worker."
    )
    release_reason = models.TextField(blank=True, default="", db_default="")
    # Set when compaction (receipts/compaction.py) dropped the stored request and response
    # body of this completed receipt, under its operation's `compact_after_seconds`; the
    # fingerprint, status, response status, references and counts stay until it expires. A
    # replay then answers 410 receipt-compacted (receipts/responses.py:refusal). Cleared by
    # the claim that starts a new life on the key once it expired.
    compacted_at = models.DateTimeField(null=True, blank=True, db_default=None)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="receipt_scope_key_uniq"),
        ]
        indexes = [
            models.Index(fields=["status", "created_at"], name="receipt_status_age"),
            models.Index(fields=["expires_at"], name="receipt_expiry"),
            models.Index(fields=["operation", "created_at"], name="receipt_operation_age"),
            models.Index(fields=["created_at", "id"], name="receipt_created_id"),
            # The "failed in this window" tile counts failed receipts by updated_at; the
            # status/created_at index made it read every failed receipt's row.
            # Released receipts are not failed ones (they wait for the caller's next attempt).
            models.Index(
                fields=["updated_at"], name="receipt_failed_updated", condition=Q(status="failed", released_at=None)
            ),
            # The sweeper and the "stuck" tile only ever ask about processing rows.
            models.Index(
                fields=["lease_expires_at"],
                name="receipt_processing_lease",
                condition=Q(status="processing"),
            ),
            # Compaction's work list: completed receipts it has not compacted, by operation
            # (its policy's window) and age. Compacted ones leave it, so a run never walks
            # past what earlier runs did; the distinct operations are read from it too.
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
        """The status an operator reads: "released" for a released key, "outcome-unknown" for
        a held one, else the status."""
        if self.released:
            return "released"
        return "outcome-unknown" if self.outcome_unknown else self.status

    @property
    def outcome_unknown(self) -> bool:
        """Its attempt's lease ran out before it settled, and its operation holds such a
        receipt (`after_crash: "hold"`) instead of running it again: the effect may or may
        not have happened, so the next attempt is answered outcome-unknown until a reconcile
        function or an operator resolves it (receipts/store.py). Read as the Stuck board reads
        a lapsed lease (core.leases.is_stuck); the claim itself decides by rules.LAPSED, which
        also counts a lease that ends this very instant."""
        held = policy_for(self.operation).after_crash == "hold"
        return held and is_stuck(self, self.Status.PROCESSING, timezone.now())

    @property
    def permanent(self) -> bool:
        """Kept for ever: its operation's `ttl_seconds` was None when it was claimed."""
        return self.expires_at is None


class Attempt(AttemptLog):
    """Every request that touched a key, with what it got. Feeds charts and timelines.

    Scope, key and operation are copied so that the log outlives the receipt it refers to.
    """

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
        # A duplicate that arrived while the first attempt ran, waited for it (Prefer: wait,
        # wait_seconds) and was answered with its result: a concurrent duplicate, as a 409 is,
        # not a plain replay. `waited_ms` says how long it waited.
        WAITED = "waited"
        # A claim refused because the attempt before it lapsed under after_crash "hold".
        OUTCOME_UNKNOWN = "outcome_unknown"
        # The same request under a new key, refused under "fresh_key": "refuse": logged
        # under that key, on the receipt of the key it was first made under (receipts/fresh_keys.py).
        FRESH_KEY_RETRY = "fresh_key_retry"

    STALE_OUTCOME = Outcome.STALE_TOKEN

    @classmethod
    def record(cls, receipt: Receipt, **fields: Any) -> Attempt:
        """Write a row about `receipt`, copying its scope, key and operation (see above); a
        refused fresh-key retry's row names the key it came under instead."""
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

    # Claim requests that arrived while the key's first attempt was still running: answered
    # 409, or waited for the result. The dashboard, /api/v1/stats, /metrics and the alert
    # rule count them together as concurrent duplicates.
    CONCURRENT_OUTCOMES = (Outcome.IN_PROGRESS, Outcome.WAITED)

    # Not a database constraint, and nothing happens to the log when its receipt goes: the
    # purge deletes receipts with one DELETE instead of nulling thousands of attempt rows
    # per batch. The id may dangle once the receipt is purged; receipt ids are never reused
    # (a sequence on PostgreSQL, AUTOINCREMENT on SQLite), so it never points at another
    # receipt. Read `receipt_id` and look the receipt up, never `attempt.receipt`.
    receipt = models.ForeignKey(
        Receipt,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        # attempt_receipt_age (receipt, created_at) serves every lookup by receipt; a
        # second index on receipt alone would only cost each logged attempt one more write.
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
    # For a claim request that waited for the running first attempt (Prefer: wait,
    # wait_seconds): how long, in milliseconds, whatever it got in the end. None: it did not wait.
    waited_ms = models.PositiveIntegerField(null=True, blank=True)
    # For a claim request (CLAIM_OUTCOMES): how long the claim took to decide, in
    # milliseconds, from the store being asked (receipts.store.claim / aclaim, after the
    # front door read the request) to the decision this row records, less any wait for a
    # running first attempt (that is `waited_ms`). On PostgreSQL's one-statement claim the
    # statement's own part is the server's clock from the statement's start to the
    # decision (receipts/pg.py); the commit is never in it. None on settles. Written with
    # the row the claim writes anyway: measuring it costs no write.
    claim_ms = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["outcome", "created_at"], name="attempt_outcome_age"),
            models.Index(fields=["receipt", "created_at"], name="attempt_receipt_age"),
            # Replaces the plain created_at index: the dashboard's window counts and series
            # group a time range by outcome, and with outcome in the index they are
            # index-only scans instead of a heap visit per attempt; with claim_ms in it, so
            # is the claim-duration roll-up (receipts.rollup.CLAIMS), at no extra index.
            models.Index(fields=["created_at", "outcome", "claim_ms"], name="attempt_age_outcome_claim"),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.outcome}"


class AttemptHourly(HourlyCount):
    """How many attempts of each outcome were logged in one UTC hour: the attempt log rolled
    up (`receipts.rollup`), so that a dashboard window reads a few hundred rows, not every
    attempt in it. Counts are absolute, recomputed from the log, never incremented."""

    outcome = models.CharField(max_length=32, choices=Attempt.Outcome.choices)

    Meta = per_hour("attempts per hour", "outcome")


class ClaimDurationHourly(DurationHourly):
    """How many claims of one UTC hour took how long: a histogram bucket of `claim_ms`
    (idemdash.core.attempts.CLAIM_BOUNDS_MS), rolled up from the attempt log
    (`receipts.rollup.CLAIMS`; settles fall in NO_DURATION): the overview's claim-latency
    history and /metrics' idemdash_receipt_claim_duration_seconds."""

    Meta = per_hour("claim durations per hour", "bucket")


class ArchivedReceipt(models.Model):
    """A financial receipt kept after its expiry, copied in the transaction that deletes it.

    A key can live several lives (an expired key may be claimed again), so the archive may
    hold several rows for one (scope, key); `original_id` and `created_at` tell them apart.
    """

    original_id = models.BigIntegerField()
    scope = models.CharField(max_length=255)
    key = models.CharField(max_length=255)
    operation = models.CharField(max_length=100)
    fingerprint = models.CharField(max_length=64)
    request = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=16)
    retryable = models.BooleanField()
    response_status = models.PositiveSmallIntegerField(null=True, blank=True)
    response_content_type = models.CharField(max_length=255, blank=True)
    response_body = models.TextField(blank=True)
    error = models.TextField(blank=True)
    attempts = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    user_id = models.CharField(max_length=255, blank=True)
    session_id = models.CharField(max_length=255, blank=True)
    # Copied like the rest: a compacted receipt's archived copy has no body either, and says why.
    compacted_at = models.DateTimeField(null=True, blank=True, db_default=None)
    archived_at = models.DateTimeField(db_index=True)

    class Meta:
        indexes = [models.Index(fields=["scope", "key"], name="archived_receipt_scope_key")]

    def __str__(self) -> str:
        return f"{self.scope}/{self.key} (archived)"

    # The fields copied from Receipt, in one place for the archiver.
    COPIED = (
        "scope", "key", "operation", "fingerprint", "request", "status", "retryable",
        "response_status", "response_content_type", "response_body", "error", "attempts",
        "created_at", "completed_at", "expires_at", "user_id", "session_id", "compacted_at",
    )


class ReceiptReference(Reference):
    """What an attempt of the receipt said it worked on (`receipts.current().refer`, or the
    JSON API's `references` on complete and fail), stored with that attempt's settle."""

    OWNER = "receipt"

    receipt = models.ForeignKey(Receipt, on_delete=models.CASCADE, related_name="references", db_index=False)

    class Meta:
        constraints, indexes = meta_options("receipt", "receipt_ref")


class ObservedRequest(models.Model):
    """A write request to a route no receipt protects, as the observer noted it
    (receipts/observe.py): its caller, route and fingerprint, never its body. The same
    fingerprint on the same route again within RECEIPTS_OBSERVE_WINDOW_SECONDS is a would-be
    duplicate. `skipped` says why a request was not fingerprinted (its body too large, or
    streamed): counted, never compared."""

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
    """The observer's notes of one UTC hour, per route and `kind`: "first", "duplicate" (a
    would-be duplicate) or "skipped" (receipts.rollup.OBSERVED), so that the coverage's
    figures outlive the notes (RECEIPTS_OBSERVE_RETENTION_HOURS)."""

    method = models.CharField(max_length=8)
    route = models.CharField(max_length=255)
    kind = models.CharField(max_length=16)

    Meta = per_hour("observed requests per hour", "method", "route", "kind")


class FirstKey(models.Model):
    """The key a request was first made under, for an operation that refuses fresh-key
    retries (receipts/fresh_keys.py): one row per (scope, operation, fingerprint), named by
    their digest, so that of two copies of a request under new keys exactly one inserts it."""

    digest = models.CharField(max_length=64, unique=True)
    receipt_id = models.BigIntegerField()
    key = models.CharField(max_length=255)
    created_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.key} ({self.digest[:12]})"
