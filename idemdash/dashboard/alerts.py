"""Alerts: rules on the dashboard's figures, evaluated on a schedule, notified through the outbox.

`evaluate()` measures every enabled rule's figure and moves its alert between two states,
each settled by the database: **fire** is a unique insert (one firing alert per rule), and
**resolve** a conditional UPDATE firing → resolved. Each transition, and each reminder its
incident makes due (idemdash.dashboard.incidents), enqueues its notification in the same
transaction under a key of its own (`notification_key`), so it is enqueued once, and the
outbox delivers it at least once with that key. Caller text in a notification (the rule's
name) goes through idemdash.core.caller_text, so it cannot reverse the message around it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.db.models.functions import TruncMinute
from django.urls import reverse
from django.utils import timezone

from idemdash.core import audit
from idemdash.core.models import AuditEntry
from idemdash.core.caller_text import isolated_plain, reveal
from idemdash.dashboard import incidents, queries
from idemdash.dashboard.conf import setting
from idemdash.dashboard.alert_rules import (
    INSTANT_METRICS,
    PERCENT_METRICS,
    WINDOW_NAMES,
    format_threshold,
    format_value,
    window_label,
)
from idemdash.dashboard.models import Alert, AlertRule
from receipts.models import Attempt
from receipts.outbox.models import OutboxMessage
from receipts.outbox.store import enqueue

log = logging.getLogger(__name__)

Metric = AlertRule.Metric
State = Alert.State

# A key "fails repeatedly" when its receipt failed at least this many times in the window
# (each failed attempt is one row of the attempt log, so retried keys are counted once).
REPEATED_FAILURES = 2

# The page that shows what a metric counts, filtered to it: where a notification links.
CAUSE_PAGES: dict[str, str] = {
    Metric.DUPLICATE_RATE: "dashboard:overview",
    Metric.CONCURRENT_DUPLICATES: "dashboard:receipts?conflict=concurrent",
    Metric.MISMATCH_CONFLICTS: "dashboard:receipts?conflict=422",
    Metric.FAILING_KEYS: "dashboard:receipts?status=failed&sort=-updated",
    Metric.STUCK_ROWS: "dashboard:stuck",
    Metric.DEAD_WEBHOOK_EVENTS: "dashboard:events?status=dead",
    Metric.DEAD_OUTBOX_MESSAGES: "dashboard:outbox?status=dead",
    Metric.OUTBOX_BACKLOG_AGE: "dashboard:outbox?status=waiting",
    Metric.REJECTED_DELIVERIES: "dashboard:rejected",
    Metric.UNPROTECTED_DUPLICATES: "dashboard:coverage",
    Metric.FRESH_KEY_RETRIES: "dashboard:coverage",
    Metric.FAILING_GROUPS: "dashboard:failures",
}


# --- metrics ------------------------------------------------------------------------------


class Measurements:
    """The figures of one evaluation, all at the same instant. Rules sharing a metric and
    a window share one measurement, and one block of the dashboard's figures for a window
    (`queries.BLOCKS`) serves every metric taken from it, so an alert means exactly what
    the tile of the same name shows."""

    def __init__(self, now: datetime) -> None:
        self.now = now
        self._cache: dict[tuple[str, int], float] = {}
        self._blocks: dict[tuple[str, int], dict[str, Any]] = {}

    def __call__(self, metric: str, window_minutes: int) -> float:
        if metric in INSTANT_METRICS:
            window_minutes = 0
        key = (metric, window_minutes)
        if key not in self._cache:
            self._cache[key] = float(METRICS[metric](self, timedelta(minutes=window_minutes)))
        return self._cache[key]

    def figure(self, dotted: str, span: timedelta) -> float:
        """Figure "block.name" of a stats block (a key of `queries.BLOCKS`) over the last
        `span`: its tile's number."""
        block, name = dotted.split(".")
        key = (block, int(span.total_seconds() // 60))
        if key not in self._blocks:
            window = queries.Window(window_label(key[1]), span, span, TruncMinute)
            self._blocks[key] = queries.BLOCKS[block](window, self.now)
        return self._blocks[key][name]


def _figure(dotted: str) -> Callable[[Measurements, timedelta], float]:
    """The metric that is a figure of a stats block ("block.name"): its tile's number."""
    return lambda m, span: m.figure(dotted, span)


def failing_keys(m: Measurements, span: timedelta) -> int:
    """Keys with at least REPEATED_FAILURES failed attempts in the window (from the attempt
    log, so a key counts even after retention removed its receipt)."""
    return (
        Attempt.objects.filter(outcome=Attempt.Outcome.FAILED, created_at__gt=m.now - span, created_at__lte=m.now)
        .values("scope", "key")
        .annotate(n=Count("id"))
        .filter(n__gte=REPEATED_FAILURES)
        .count()
    )


def stuck_rows(m: Measurements, span: timedelta) -> int:
    """Rows a worker holds past its lease right now, in all three stores."""
    return sum(stuck(m.now).count() for stuck in (queries.stuck_receipts, queries.stuck_events, queries.stuck_messages))


BACKLOG = (OutboxMessage.Status.PENDING, OutboxMessage.Status.RETRY, OutboxMessage.Status.IN_FLIGHT)


def outbox_backlog_age(m: Measurements, span: timedelta) -> float:
    """Seconds since the oldest message that is neither sent nor dead was enqueued; 0 when
    the outbox is empty."""
    return queries.oldest_age(OutboxMessage.objects.filter(status__in=BACKLOG), "created_at", m.now)


# Where each figure comes from: the dashboard's own blocks, except the stuck rows of all
# three stores and the two it has no tile for (keys failing repeatedly, and the backlog age
# counting messages in flight too). Fresh-key retries are those that ran again.
METRICS: dict[str, Callable[[Measurements, timedelta], float]] = {
    Metric.DUPLICATE_RATE: _figure("receipts.duplicate_rate"),
    Metric.CONCURRENT_DUPLICATES: _figure("receipts.concurrent_duplicates"),
    Metric.MISMATCH_CONFLICTS: _figure("receipts.mismatch_conflicts"),
    Metric.FAILING_KEYS: failing_keys,
    Metric.STUCK_ROWS: stuck_rows,
    Metric.DEAD_WEBHOOK_EVENTS: _figure("webhooks.dead"),
    Metric.DEAD_OUTBOX_MESSAGES: _figure("outbox.dead"),
    Metric.OUTBOX_BACKLOG_AGE: outbox_backlog_age,
    Metric.REJECTED_DELIVERIES: _figure("webhooks.rejected"),
    Metric.UNPROTECTED_DUPLICATES: _figure("unprotected.duplicates"),
    Metric.FRESH_KEY_RETRIES: _figure("fresh_keys.ran_again"),
    Metric.FAILING_GROUPS: lambda m, span: queries.failing_groups(m.now - span).count(),
}
assert set(METRICS) == set(Metric.values), "every metric needs a function"


def in_rule_unit(metric: str, value: float) -> float:
    """A measured figure in the unit its rule's threshold is in (percent for rates)."""
    return round(value * 100, 6) if metric in PERCENT_METRICS else value


def breached(rule: AlertRule, value: float) -> bool:
    value = in_rule_unit(rule.metric, value)
    return value >= rule.threshold if rule.comparison == AlertRule.Comparison.GTE else value > rule.threshold


def page_path(page: str) -> str:
    """A page named "urlname", "urlname?query" or "urlname#fragment", as a path."""
    name, sep, rest = page.partition("?") if "?" in page else page.partition("#")
    return reverse(name) + sep + rest


def cause_path(metric: str, window_minutes: int | None = None) -> str:
    """The path of the page that shows what `metric` counts, filtered to it: where the
    banner, the overview's first line and a notification link."""
    if CAUSE_PAGES[metric] == "dashboard:overview" and window_minutes in WINDOW_NAMES:
        return f"{reverse('dashboard:overview')}?window={WINDOW_NAMES[window_minutes]}"
    return page_path(CAUSE_PAGES[metric])


def absolute(path: str) -> str:
    """`path` as a link in a notification, read away from the dashboard (IDEMDASH_BASE_URL)."""
    return setting("IDEMDASH_BASE_URL").rstrip("/") + path


def cause_url(metric: str, window_minutes: int | None = None) -> str:
    """`cause_path` as an absolute URL (IDEMDASH_BASE_URL), for notifications."""
    return absolute(cause_path(metric, window_minutes))


# --- notifications --------------------------------------------------------------------------


def notification_key(alert: Alert, transition: str) -> str:
    """One key per (alert, transition): a repeated evaluation cannot add a second message.
    The outbox sends it as the Idempotency-Key / Message-ID, so a receiver can drop a repeat;
    a rule that fires again after resolving opens a new Alert, hence a new key."""
    return f"idemdash:alert:{alert.pk}:{transition}"


UNITS = {Metric.DUPLICATE_RATE: "percent", Metric.OUTBOX_BACKLOG_AGE: "seconds"}


def notification_text(alert: Alert, rule: AlertRule, transition: str, value: float | None = None) -> str:
    """The one line a notification says; `value` is the figure now (for a reminder)."""
    name = isolated_plain(rule.name)
    condition = f"({rule.comparison} {format_threshold(rule.metric, rule.threshold)} {rule.span_text})"
    if transition == "fired":
        return f"[FIRING] {name}: {rule.get_metric_display()} is {format_value(rule.metric, alert.value)} {condition}"
    if transition.startswith(incidents.Kind.STILL_FAILING):
        n = transition.rpartition(":")[2]
        shown = "" if value is None else f" is {format_value(rule.metric, value)}"
        return (f"[STILL FIRING] {name}: {rule.get_metric_display()}{shown} {condition}; firing since "
                f"{alert.fired_at:%Y-%m-%d %H:%M:%S} UTC, not acknowledged; reminder {n} of {incidents.reminders()}")
    if transition == incidents.Kind.EXHAUSTED:
        return (f"[STILL FIRING, LAST REMINDER] {name}: {rule.get_metric_display()} {condition} since "
                f"{alert.fired_at:%Y-%m-%d %H:%M:%S} UTC; no more reminders until it resolves or is acknowledged")
    now_value = "" if alert.resolved_value is None else f", now {format_value(rule.metric, alert.resolved_value)}"
    reason = f" ({alert.resolved_reason})" if alert.resolved_reason else ""
    return f"[RESOLVED] {name}: {rule.get_metric_display()}{now_value}{reason}; fired at {alert.fired_at:%Y-%m-%d %H:%M:%S} UTC"


def notification(alert: Alert, rule: AlertRule, transition: str, value: float | None = None) -> tuple[str, dict[str, Any]]:
    """The outbox action and payload for one transition of `alert`."""
    text = notification_text(alert, rule, transition, value)
    url = cause_url(rule.metric, rule.window_minutes)
    incident_url = absolute(reverse("dashboard:incident", args=[alert.pk]))
    # Threshold and values in one unit, the rule's (percent for rates), named by `unit`.
    details = {
        "alert_id": alert.pk,
        "transition": transition,
        "rule": reveal(rule.name),
        "state": alert.state,
        "metric": rule.metric,
        "comparison": rule.comparison,
        "threshold": rule.threshold,
        "unit": UNITS.get(rule.metric, "count"),
        "window_minutes": rule.window_minutes,
        "value": in_rule_unit(rule.metric, alert.value),
        "resolved_value": None if alert.resolved_value is None else in_rule_unit(rule.metric, alert.resolved_value),
        "fired_at": alert.fired_at.isoformat(),
        "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
        "url": url,
        "incident_url": incident_url,
    }
    if rule.channel == AlertRule.Channel.EMAIL:
        lines = [text, "", f"See what caused it: {url}", f"The incident: {incident_url}", ""]
        lines += [f"{name}: {value}" for name, value in details.items()]
        return "email.send", {"to": rule.target, "subject": f"[idemdash] {text}"[:200], "body": "\n".join(lines)}
    # Slack's incoming webhooks read `text` and ignore the rest; other receivers get the figures.
    return "http.post", {"url": rule.target, "json": {"text": f"{text} <{url}>", "alert": details}, "headers": {}}


def _notify(alert: Alert, rule: AlertRule, transition: str, value: float | None = None) -> str:
    """Enqueue the notification, in the caller's transaction; its key, or "" when the
    outbox refused it."""
    key = notification_key(alert, transition)
    action, payload = notification(alert, rule, transition, value)
    try:
        enqueue(action, payload, key)
    except ValueError as exc:
        # The target passed validation when the rule was saved, but the outbox refuses it
        # now (OUTBOX_HTTP_ALLOWED_HOSTS changed, say). The alert still changes state, so
        # the dashboard shows it; the reason is kept on the alert.
        log.warning("alert %s: %s notification not queued: %s", alert.pk, transition, exc)
        Alert.objects.filter(pk=alert.pk).update(notification_error=f"{transition}: {exc}")
        alert.notification_error = f"{transition}: {exc}"
        return ""
    if transition in ("fired", "resolved"):
        name = f"{transition}_notification_key"
        Alert.objects.filter(pk=alert.pk).update(**{name: key})
        setattr(alert, name, key)
    return key


# --- transitions ------------------------------------------------------------------------


def fire(rule: AlertRule, value: float, now: datetime) -> Alert | None:
    """Open a firing alert for `rule` and enqueue its notification; None when the rule
    already has a firing alert (another evaluator got there first): a partial unique index
    allows one firing alert per rule, so of two evaluators that see the same breach at once,
    one insert wins and the other gets an IntegrityError and does nothing."""
    with transaction.atomic():
        try:
            with transaction.atomic():
                alert = Alert.objects.create(
                    rule=rule, rule_name=rule.name, metric=rule.metric, condition=rule.condition,
                    state=State.FIRING, value=value, fired_at=now,
                )
        except IntegrityError:
            return None
        _notify(alert, rule, "fired")
        incidents.open_for(alert, now)
    return alert


def remind(alert: Alert, rule: AlertRule, value: float, now: datetime) -> str | None:
    """`alert` is still firing at this evaluation: count it on its incident, and notify the
    reminder that made due, if any (claimed by one evaluator only). The transition sent, or None."""
    with transaction.atomic():
        transition = incidents.count_evaluation(alert, now)
        if transition is None:
            return None
        key = _notify(alert, rule, transition, value)
        kind = transition.partition(":")[0]
        incidents.record(alert.pk, kind, now, detail=f"value {format_value(rule.metric, value)}", key=key)
    return transition


def resolve(alert: Alert, now: datetime, *, value: float | None = None, reason: str = "") -> bool:
    """firing → resolved, once; the resolved notification goes out with it. False when
    someone else resolved it first, or when it fired after `now` (a later evaluation
    than the one whose figure says it cleared)."""
    with transaction.atomic():
        updated = Alert.objects.filter(pk=alert.pk, state=State.FIRING, fired_at__lte=now).update(
            state=State.RESOLVED, resolved_at=now, resolved_value=value, resolved_reason=reason[:255]
        )
        if updated != 1:
            return False
        alert.refresh_from_db()
        if alert.rule is not None:
            _notify(alert, alert.rule, "resolved")
        incidents.close(alert, now)
    return True


@dataclass
class EvaluationResult:
    evaluated: int = 0
    fired: list[int] = field(default_factory=list)  # alert ids
    resolved: list[int] = field(default_factory=list)
    still_firing: int = 0
    reminded: list[int] = field(default_factory=list)  # alert ids with a reminder sent
    values: dict[str, float] = field(default_factory=dict)  # rule name -> figure


def evaluate(now: datetime | None = None, *, rules: Iterable[AlertRule] | None = None) -> EvaluationResult:
    """Measure every rule (or those given) and fire or resolve its alert. Safe to run in
    several processes at once: the insert and the conditional UPDATE are the only guards,
    and the read of firing alerts below only saves them work."""
    now = now or timezone.now()
    result = EvaluationResult()
    measurements = Measurements(now)
    rules = list(AlertRule.objects.all() if rules is None else rules)
    firing = {a.rule_id: a for a in Alert.objects.filter(state=State.FIRING, rule__in=[r.pk for r in rules])}
    for rule in rules:
        alert = firing.get(rule.pk)
        if not rule.enabled:
            if alert is not None and resolve(alert, now, reason="rule disabled"):
                result.resolved.append(alert.pk)
            continue
        value = measurements(rule.metric, rule.window_minutes)
        result.evaluated += 1
        result.values[rule.name] = value
        if breached(rule, value):
            if alert is not None:
                result.still_firing += 1
                if remind(alert, rule, value, now):
                    result.reminded.append(alert.pk)
                continue
            fired = fire(rule, value, now)
            if fired is not None:
                result.fired.append(fired.pk)
            else:
                result.still_firing += 1
        elif alert is not None and resolve(alert, now, value=value, reason="condition cleared"):
            result.resolved.append(alert.pk)
    return result


# --- operators' changes to rules (dashboard and admin alike), audited ----------------------


def _rule_state(rule: AlertRule) -> str:
    return "enabled" if rule.enabled else "disabled"


def save_rule(rule: AlertRule, *, actor: str, user: Any = None, before: str = "") -> AlertRule:
    """Create or update a rule; `before` is the rule's state before the edit ("" for new)."""
    created = rule.pk is None
    if created and getattr(user, "pk", None) and rule.created_by_id is None:
        rule.created_by = user
    with transaction.atomic():
        rule.save()
        audit.record(actor, "alert_rule.create" if created else "alert_rule.update", rule,
                     status_before=before, status_after=_rule_state(rule),
                     detail=f"{rule.condition}; notify by {rule.channel} {rule.target_display}", user=user)
    return rule


# What pages on a fresh install (each fault the demo stages opens an incident through one):
# installed once by migrate, then the operators' to edit; one deleted stays deleted.
DEFAULT_RULES = [
    {"name": "Dead webhook events", "metric": Metric.DEAD_WEBHOOK_EVENTS, "window_minutes": 60},
    {"name": "Dead outbox messages", "metric": Metric.DEAD_OUTBOX_MESSAGES, "window_minutes": 60},
    {"name": "Stuck work", "metric": Metric.STUCK_ROWS, "window_minutes": 60},
    {"name": "Failing groups", "metric": Metric.FAILING_GROUPS, "window_minutes": 60},
]
INSTALLER = "migrate"  # the audit log's actor for them, and how a rule installed once is known


def install_default_rules() -> list[str]:
    """DEFAULT_RULES not installed before (no audit entry of their creation by migrate), each
    above 0 and emailing IDEMDASH_DEFAULT_ALERTS_TO; the names installed now."""
    to = setting("IDEMDASH_DEFAULT_ALERTS_TO")
    if not to:
        return []
    done = set(AuditEntry.objects.filter(actor=INSTALLER, action="alert_rule.create").values_list("object_name", flat=True))
    installed = []
    for spec in DEFAULT_RULES:
        if spec["name"] in done or AlertRule.objects.filter(name=spec["name"]).exists():
            continue
        rule = AlertRule(**spec, comparison=AlertRule.Comparison.GT, threshold=0, channel=AlertRule.Channel.EMAIL, target=to)
        rule.full_clean()
        save_rule(rule, actor=INSTALLER)
        installed.append(rule.name)
    return installed


def delete_rule(rule: AlertRule, *, actor: str, user: Any = None) -> None:
    """Delete a rule, resolving its firing alert first (with its notification), so no
    alert is left firing with no rule to clear it. The history keeps the rule's name."""
    now = timezone.now()
    with transaction.atomic():
        for alert in Alert.objects.filter(rule=rule, state=State.FIRING):
            resolve(alert, now, reason="rule deleted")
        audit.record(actor, "alert_rule.delete", rule, status_before=_rule_state(rule), status_after="deleted",
                     detail=rule.condition, user=user)
        rule.delete()


def evaluate_rule(rule: AlertRule, *, actor: str, user: Any = None) -> EvaluationResult:
    """An operator's "evaluate now" of one rule, written to the audit log."""
    before = "firing" if Alert.objects.filter(rule=rule, state=State.FIRING).exists() else "ok"
    result = evaluate(rules=[rule])
    after = "firing" if Alert.objects.filter(rule=rule, state=State.FIRING).exists() else "ok"
    value = result.values.get(rule.name)
    audit.record(actor, "alert_rule.evaluate", rule, status_before=before, status_after=after,
                 detail="" if value is None else f"value {format_value(rule.metric, value)}", user=user)
    return result


# --- reads for the pages ------------------------------------------------------------------


CHANNEL_OF_ACTION = {"email.send": AlertRule.Channel.EMAIL.label, "http.post": "HTTP POST"}


@dataclass
class Notification:
    transition: str  # fired / resolved
    channel: str
    message: OutboxMessage | None  # None once retention purged it


def attach_notifications(rows: list[Alert]) -> None:
    """Give each alert `notifications`: its channel, and the outbox message that carries
    each transition's notification (when it was queued, its status), in one query."""
    keys = [k for a in rows for k in (a.fired_notification_key, a.resolved_notification_key) if k]
    messages = {m.key: m for m in OutboxMessage.objects.filter(key__in=keys)} if keys else {}
    for a in rows:
        a.notifications = []
        for transition, key in (("fired", a.fired_notification_key), ("resolved", a.resolved_notification_key)):
            if not key:
                continue
            message = messages.get(key)
            if a.rule is not None:
                channel = f"{a.rule.get_channel_display().split(' (')[0]} to {a.rule.target_display}"
            else:
                channel = CHANNEL_OF_ACTION.get(message.action, message.action) if message else "?"
            a.notifications.append(Notification(transition, channel, message))


def overview_alerts(window: queries.Window, now: datetime | None = None, *, limit: int = 5) -> dict[str, Any]:
    """Firing alerts (each with its incident, and `cause`: the path of the page showing what
    it counts), and alerts resolved within the overview's window."""
    now = now or timezone.now()
    resolved = Alert.objects.filter(state=State.RESOLVED, resolved_at__gt=now - window.span, resolved_at__lte=now)
    firing = list(Alert.objects.filter(state=State.FIRING).select_related("incident", "rule").order_by("-fired_at", "-id"))
    for a in firing:
        a.cause = cause_path(a.metric, a.rule.window_minutes if a.rule else None)
    return {
        "firing": firing,
        "resolved": list(resolved.order_by("-resolved_at", "-id")[:limit]),
        "resolved_total": resolved.count(),
    }


# Django's backends that deliver nothing (Django 6.1's mail.E001 names the same four), and
# what each does with a message instead.
DEVELOPMENT_MAIL_BACKENDS = {
    "django.core.mail.backends.console.EmailBackend": "printed to the process's output",
    "django.core.mail.backends.filebased.EmailBackend": "written to files",
    "django.core.mail.backends.locmem.EmailBackend": "kept in memory",
    "django.core.mail.backends.dummy.EmailBackend": "dropped",
}


def default_mail_backend() -> str:
    """The backend that email.send and email alerts use: MAILERS' default (Django 6.1), else
    EMAIL_BACKEND."""
    if hasattr(settings, "MAILERS"):
        return settings.MAILERS.get("default", {}).get("BACKEND", "django.core.mail.backends.smtp.EmailBackend")
    return settings.EMAIL_BACKEND


def undelivered_mail() -> str:
    """What becomes of mail here when it is not delivered ("" when it is): said by
    `check --deploy` (idemdash.W030) and on the alert rules' pages, where an email rule's
    history would still say "sent"."""
    fate = DEVELOPMENT_MAIL_BACKENDS.get(default_mail_backend())
    return f"Mail on this server is {fate}, not sent" if fate else ""
