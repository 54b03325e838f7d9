from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from django.db import models
from django.db.models import Q

from idemdash.core.attempts import AttemptLog, DurationHourly
from idemdash.core.leases import LeasedWork, Scheduled
from idemdash.core.reference_rows import Reference, meta_options
from idemdash.core.rollup import HourlyCount, per_hour

# Without its app, Django would file these models under `receipts` (the installed app whose
# name prefixes this module's), and the first query would fail on a table no migration
# made ("receipts_outboxmessage"). Every use (enqueue, the drain, the API) imports this
# module, so it says the fix instead; `receipts/checks.py:outbox_installed` says it at
# start-up when a project shows it uses the outbox.
if not apps.is_installed("receipts.outbox"):
    raise ImproperlyConfigured(
        'The outbox is an app of its own: add "receipts.outbox" to INSTALLED_APPS (after '
        '"receipts") and run migrate (docs/outbox.md).'
    )


class OutboxMessage(LeasedWork, Scheduled):
    """A side effect to perform once, written in the same transaction as the change it follows.

    Identified by (scope, key): in-process callers use the empty scope, API clients their
    own (`client:<name>`), so two clients can never collide on a key. The key itself goes
    downstream unchanged (Idempotency-Key header, Message-ID).
    """

    class Status(models.TextChoices):
        PENDING = "pending"
        IN_FLIGHT = "in_flight"
        SENT = "sent"
        RETRY = "retry"
        DEAD = "dead"

    scope = models.CharField(max_length=255, blank=True, default="")
    key = models.CharField(max_length=255)
    action = models.CharField(max_length=100)
    # Where the action sends it (http.post: the URL's host), written at enqueue from the
    # action's `destination`, so that the claim can skip a paused host in SQL.
    destination_host = models.CharField(max_length=255, blank=True, default="")
    payload = models.JSONField(default=dict, blank=True)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of action and payload.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="Claims so far, including one in flight.")
    # Fencing: every claim bumps the token, and a drainer may settle a message only with the
    # token it claimed it with, so a drainer whose lease ran out cannot overwrite the result
    # of the drainer that took the message over.
    fencing_token = models.PositiveBigIntegerField(default=0)
    claimed_by = models.CharField(max_length=255, blank=True)
    last_error = models.TextField(blank=True)
    # The group of its last failure (idemdash/core/failures.py), cleared when it succeeds.
    failure_signature = models.CharField(max_length=32, blank=True, default="", db_default="", editable=False)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    # What was running when it was enqueued (clients/python/idemdash_client/references.py): a receipt's attempt
    # ("receipt") or a webhook event's handler ("webhook_event"), and that row's id. A kind
    # and an id, not foreign keys: the outbox is installed without webhooks, and a cause
    # purged before its message leaves the id (ids are never reused), read as "purged".
    cause_kind = models.CharField(max_length=16, blank=True, default="", db_default="")
    cause_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["scope", "key"], name="outbox_scope_key_uniq"),
        ]
        indexes = [
            models.Index(fields=["failure_signature"], name="outbox_failure", condition=~Q(failure_signature="")),
            # The drain asks for due messages of these two kinds only.
            models.Index(
                fields=["next_attempt_at"],
                name="outbox_due",
                condition=Q(status__in=["pending", "retry"]),
            ),
            models.Index(
                fields=["lease_expires_at"],
                name="outbox_inflight_lease",
                condition=Q(status="in_flight"),
            ),
            models.Index(fields=["status", "updated_at"], name="outbox_status_age"),
            models.Index(fields=["action", "created_at"], name="outbox_action_age"),
            # The dashboard: messages enqueued in a window (and per hour and action, for the
            # chart) as index-only scans, and the oldest waiting message as one index probe.
            models.Index(fields=["created_at", "action"], name="outbox_created_action"),
            models.Index(fields=["created_at"], name="outbox_waiting_age", condition=Q(status__in=["pending", "retry"])),
            # A paused host's backlog: how many wait and the oldest, one index range each.
            models.Index(
                fields=["destination_host", "created_at"],
                name="outbox_host_waiting",
                condition=Q(status__in=["pending", "retry"]),
            ),
            # A receipt's or an event's page lists the messages it caused.
            models.Index(fields=["cause_kind", "cause_id"], name="outbox_cause"),
        ]

    def __str__(self) -> str:
        return f"{self.action} {self.key} ({self.status})"


class OutboxPause(models.Model):
    """Sending paused for one action or one destination host, by an operator
    (receipts/outbox/pauses.py): the drain claims none of its messages while the row exists;
    they are still enqueued and wait. Resuming deletes the row (the audit log keeps both)."""

    class Kind(models.TextChoices):
        ACTION = "action", "action"
        HOST = "host", "destination host"

    kind = models.CharField(max_length=16, choices=Kind.choices)
    target = models.CharField(max_length=255, help_text="The action's name, or the host (lower case).")
    note = models.CharField(max_length=500, blank=True)
    paused_by = models.CharField(max_length=255, blank=True)
    paused_at = models.DateTimeField()

    class Meta:
        constraints = [
            # Pausing twice is an insert that finds the row there: harmless, audited once.
            models.UniqueConstraint(fields=["kind", "target"], name="outbox_pause_target_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.target} (paused)"


class MessageReference(Reference):
    """What a message is about, given when it was enqueued (`references=`, the JSON API's
    `references`), stored with the message."""

    OWNER = "message"

    message = models.ForeignKey(OutboxMessage, on_delete=models.CASCADE, related_name="references", db_index=False)

    class Meta:
        constraints, indexes = meta_options("message", "outbox_message_ref")


class OutboxAttempt(AttemptLog):
    """One try at performing a message: what came back and how long it took.

    Scope, key and action are copied so that the log (and the charts built on it) outlive
    the message when retention deletes it.
    """

    class Outcome(models.TextChoices):
        SENT = "sent"
        RETRY = "retry"
        DEAD = "dead"
        # The action ran, but the drainer had lost its claim meanwhile: a possible duplicate
        # downstream, which the idempotency key lets the receiver absorb.
        STALE = "stale"

    STALE_OUTCOME = Outcome.STALE

    @staticmethod
    def copied_from(message: OutboxMessage) -> dict[str, Any]:
        """The fields a row copies from its message (see above), as of the attempt it records."""
        return {
            "message": message,
            "scope": message.scope,
            "key": message.key,
            "action": message.action,
            "number": message.attempts,
            "fencing_token": message.fencing_token,
        }

    message = models.ForeignKey(
        OutboxMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="attempt_log"
    )
    scope = models.CharField(max_length=255, blank=True)
    action = models.CharField(max_length=100)
    number = models.PositiveIntegerField(help_text="Which attempt of the message this was.")
    fencing_token = models.PositiveBigIntegerField()
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    drainer = models.CharField(max_length=255, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["outcome", "created_at"], name="outbox_attempt_outcome_age"),
            # Replaces the plain created_at index: the outbox chart groups a time range by
            # outcome, index-only with outcome in the index (as the receipts' attempt log).
            models.Index(fields=["created_at", "outcome"], name="outbox_attempt_age_outcome"),
            models.Index(fields=["message", "created_at"], name="outbox_attempt_message_age"),
        ]

    def __str__(self) -> str:
        return f"{self.key} #{self.number}: {self.outcome}"



class OutboxMessageHourly(HourlyCount):
    """How many outbox messages were enqueued in one UTC hour: the messages rolled up
    (`receipts.outbox.rollup`), so that a dashboard window reads a few dozen rows, not every
    message in it. Counts are absolute, recomputed from the messages, never incremented; an
    hour keeps its count when retention later deletes its messages (sent ones after 7 days)."""

    Meta = per_hour("messages enqueued per hour")


class OutboxAttemptHourly(HourlyCount):
    """How many outbox attempts of each outcome were logged in one UTC hour: the attempt log
    rolled up (`receipts.outbox.rollup`); an hour keeps its counts past the attempts' own
    retention."""

    outcome = models.CharField(max_length=16, choices=OutboxAttempt.Outcome.choices)

    Meta = per_hour("outbox attempts per hour", "outcome")


class SendDurationHourly(DurationHourly):
    """How long the sends of one UTC hour took, as a histogram: outbox attempts counted by
    bucket of `duration_ms` (idemdash.core.attempts.DURATION_BOUNDS_MS), rolled up from the
    attempt log (`receipts.outbox.rollup`): the overview's send-duration history."""

    Meta = per_hour("send durations per hour", "bucket")


class BacklogAgeHourly(models.Model):
    """The oldest waiting message's age, at its worst in one UTC hour, as the minute's
    roll-up run found it (`receipts.outbox.rollup.sample_backlog_age`): a gauge cannot be
    recomputed from the log afterwards, so it is sampled when it is known."""

    hour = models.DateTimeField(unique=True, help_text="Start of the hour (UTC).")
    max_age_seconds = models.PositiveIntegerField()
    samples = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "outbox backlog age per hour"
        verbose_name_plural = "outbox backlog age per hour"

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00}: {self.max_age_seconds} s at worst"
