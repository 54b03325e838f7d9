from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from idemdash.dashboard import alert_rules


class Dashboard(models.Model):
    """Holds the dashboard's permissions; no table.

    Permissions hang off a content type, and the receipts/webhooks models belong to other
    apps, so the two access levels live on this model-less anchor instead."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_dashboard", "Can see every dashboard page and figure"),
            ("operate", "Can release, reprocess, send now and send again, one by one or in bulk, from the dashboard"),
        ]


class AlertRule(models.Model):
    """A threshold on one dashboard figure over a window; `idemdash.dashboard.alerts.evaluate` watches it."""

    Metric = alert_rules.Metric
    Channel = alert_rules.Channel

    class Comparison(models.TextChoices):
        GT = ">", "above (>)"
        GTE = ">=", "at or above (>=)"

    name = models.CharField(max_length=100, unique=True)
    metric = models.CharField(max_length=32, choices=Metric.choices)
    comparison = models.CharField(max_length=2, choices=Comparison.choices, default=Comparison.GT)
    threshold = models.FloatField(
        validators=[MinValueValidator(0, "Every figure is 0 or more; give a threshold of 0 or more.")],
        help_text="In the unit of the figure's tile: percent for the duplicate rate (20 means 20%), "
                  "seconds for the backlog age, otherwise a count."
    )
    window_minutes = models.PositiveIntegerField(
        default=60, help_text="The figure is measured over the last this many minutes."
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=500, help_text="An email address, or the URL to POST to.")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        # The model validates the target, so the dashboard form and the admin refuse the
        # same bad input, and `evaluate` never meets a target the outbox would refuse.
        if self.channel and self.target:
            try:
                alert_rules.check_target(self.channel, self.target)
            except ValidationError as exc:
                raise ValidationError({"target": exc.messages}) from None

    @property
    def window_label(self) -> str:
        return alert_rules.window_label(self.window_minutes)

    @property
    def target_display(self) -> str:
        """The target as pages, the audit log and log lines show it. A webhook URL is masked:
        a Slack incoming webhook's path is its credential, and viewers see these pages."""
        if self.channel != self.Channel.WEBHOOK:
            return self.target
        parts = urlsplit(self.target)
        host = f"{parts.hostname}:{parts.port}" if parts.port else (parts.hostname or "")
        return f"{parts.scheme}://{host}/…{self.target[-4:]}"

    @property
    def span_text(self) -> str:
        return "now" if self.metric in alert_rules.INSTANT_METRICS else f"over {self.window_label}"

    @property
    def condition(self) -> str:
        return f"{self.get_metric_display()} {self.comparison} {self.threshold_display} {self.span_text}"

    @property
    def threshold_display(self) -> str:
        return alert_rules.format_threshold(self.metric, self.threshold)


class Alert(models.Model):
    """One episode of a rule's condition holding: fired once, resolved once.

    At most one alert per rule is firing, enforced by a partial unique index, so two
    evaluators that see the same breach at the same moment insert one row between them."""

    class State(models.TextChoices):
        FIRING = "firing"
        RESOLVED = "resolved"

    # The history outlives the rule: a deleted rule's alerts keep its name and condition.
    rule = models.ForeignKey(AlertRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts")
    rule_name = models.CharField(max_length=100)
    metric = models.CharField(max_length=32, choices=AlertRule.Metric.choices)
    condition = models.CharField(max_length=255)
    state = models.CharField(max_length=16, choices=State.choices, default=State.FIRING)
    value = models.FloatField(help_text="The figure when the alert fired.")
    resolved_value = models.FloatField(null=True, blank=True)
    fired_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_reason = models.CharField(max_length=255, blank=True)
    fired_notification_key = models.CharField(max_length=255, blank=True)
    resolved_notification_key = models.CharField(max_length=255, blank=True)
    notification_error = models.TextField(
        blank=True, help_text="Why a notification could not be queued (the alert changed state regardless)."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule"], condition=models.Q(state="firing"), name="alert_one_firing_per_rule"
            ),
        ]
        indexes = [models.Index(fields=["state", "fired_at"], name="alert_state_fired")]

    @property
    def value_display(self) -> str:
        return alert_rules.format_value(self.metric, self.value)

    @property
    def resolved_value_display(self) -> str:
        return "" if self.resolved_value is None else alert_rules.format_value(self.metric, self.resolved_value)

    def __str__(self) -> str:
        return f"{self.rule_name} ({self.state} since {self.fired_at:%Y-%m-%d %H:%M})"


class HealthState(models.Model):
    """The state one overview health check (idemdash.dashboard.health) was last seen in, and
    since when: the transition is written when a check is observed in a new state (by the
    minute's schedule or an overview load), so a page reads "since" from here instead of
    scanning history."""

    # Not `check`: a field of that name would hide Model.check(), the system checks' hook.
    name = models.CharField(max_length=64, primary_key=True)
    state = models.CharField(max_length=8)
    since = models.DateTimeField(help_text="When the check was first seen in this state.")
    value = models.FloatField(help_text="The measured rate (fraction) or age (seconds) at that moment.")

    def __str__(self) -> str:
        return f"{self.name}: {self.state} since {self.since:%Y-%m-%d %H:%M:%S}"


class Incident(models.Model):
    """What operators do about one alert: it opens when the alert fires (firing), an operator
    may acknowledge it with a note (acknowledged), and it resolves with its alert (resolved).
    Its key is its alert's, so an alert and its incident share one number.

    Every move is a conditional UPDATE from the state it leaves, with a rowcount check
    (idemdash.dashboard.incidents), so two evaluators or two operators meeting on one
    incident move it once and notify or audit once."""

    class State(models.TextChoices):
        FIRING = "firing"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    alert = models.OneToOneField(Alert, primary_key=True, on_delete=models.CASCADE, related_name="incident")
    state = models.CharField(max_length=16, choices=State.choices, default=State.FIRING)
    opened_at = models.DateTimeField()
    evaluations = models.PositiveIntegerField(
        default=1, help_text="Evaluations that found the condition holding, the one that opened it included."
    )
    reminders_sent = models.PositiveSmallIntegerField(default=0)
    exhausted_at = models.DateTimeField(null=True, blank=True, help_text="When the last reminder went out.")
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=255, blank=True)
    note = models.TextField(blank=True, help_text="What the operator who acknowledged it wrote.")
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["state", "opened_at"], name="incident_state_opened")]

    def __str__(self) -> str:
        return f"Incident {self.pk}: {self.alert.rule_name} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state != self.State.RESOLVED


class IncidentEvent(models.Model):
    """One line of an incident's history: a move of its state, or a notification about it."""

    class Kind(models.TextChoices):
        FIRED = "fired"
        STILL_FAILING = "still_failing", "still failing"
        EXHAUSTED = "exhausted", "reminders exhausted"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved", "recovered"

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="history")
    at = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    actor = models.CharField(max_length=255, blank=True, help_text="The operator; blank for the evaluator.")
    detail = models.TextField(blank=True)
    notification_key = models.CharField(max_length=255, blank=True)

    class Meta:
        # In the order the moves were made: racing evaluators each stamp their own `now`,
        # which need not follow the order in which they claimed their moves.
        ordering = ["id"]
