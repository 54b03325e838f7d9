"""Incidents: what operators do about an alert, and when they are told about it
(docs/dashboard.md, "Incidents").

An alert that fires opens its incident (firing); an operator may acknowledge it with a note
(acknowledged); it resolves with its alert (resolved). Notifications go out on transitions
only (fired, still failing, exhausted, recovered), never on every evaluation:
idemdash.dashboard.alerts enqueues them through the outbox in the same transaction as the
move. Each move is a conditional UPDATE from the state it leaves, with a rowcount check."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from idemdash.core import audit
from idemdash.dashboard.conf import setting
from idemdash.dashboard.models import Alert, Incident, IncidentEvent

State = Incident.State
Kind = IncidentEvent.Kind
OPEN = (State.FIRING, State.ACKNOWLEDGED)


def _count_setting(name: str, minimum: int) -> int:
    value = setting(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ImproperlyConfigured(f"{name} must be a whole number of at least {minimum}; got {value!r}.")
    return value


def remind_every() -> int:
    return _count_setting("IDEMDASH_INCIDENT_REMIND_EVERY", 1)


def reminders() -> int:
    return _count_setting("IDEMDASH_INCIDENT_REMINDERS", 0)


def record(incident_id: int, kind: str, at: datetime, *, actor: str = "", detail: str = "", key: str = "") -> None:
    IncidentEvent.objects.create(incident_id=incident_id, kind=kind, at=at, actor=actor, detail=detail,
                                 notification_key=key)


# --- moves made by the evaluator (in the caller's transaction) --------------------------------


def open_for(alert: Alert, now: datetime) -> Incident:
    """The incident of an alert that just fired (inserted by the one evaluator whose alert
    insert won, so never twice)."""
    incident = Incident.objects.create(alert=alert, opened_at=now)
    record(incident.pk, Kind.FIRED, now, key=alert.fired_notification_key)
    return incident


def count_evaluation(alert: Alert, now: datetime) -> str | None:
    """One more evaluation found `alert` firing. Returns the notification this made due and
    claimed for the caller to send ("still_failing:<n>" or "exhausted"), or None.

    A reminder is due every `IDEMDASH_INCIDENT_REMIND_EVERY` evaluations (30: half an hour at
    the one-minute schedule) of an incident nobody has acknowledged, up to
    `IDEMDASH_INCIDENT_REMINDERS` (2); once more after the last, it is exhausted: no further
    reminders until it recovers. Two evaluators may both add to `evaluations` (each evaluation
    counts), but only one moves `reminders_sent` from n-1 to n or sets `exhausted_at`, so each
    reminder is claimed, recorded and enqueued once."""
    every, most = remind_every(), reminders()
    Incident.objects.filter(pk=alert.pk, state__in=OPEN).update(evaluations=F("evaluations") + 1)
    row = Incident.objects.filter(pk=alert.pk, state=State.FIRING).values("reminders_sent").first()
    if row is None:  # acknowledged (no reminders), resolved, or opened before incidents
        return None
    n = row["reminders_sent"] + 1
    mine = Incident.objects.filter(pk=alert.pk, state=State.FIRING, evaluations__gte=n * every)
    if n <= most:
        if mine.filter(reminders_sent=n - 1).update(reminders_sent=n) == 1:
            return f"{Kind.STILL_FAILING}:{n}"
    elif mine.filter(reminders_sent=most, exhausted_at=None).update(exhausted_at=now) == 1:
        return Kind.EXHAUSTED
    return None


def close(alert: Alert, now: datetime) -> bool:
    """firing or acknowledged → resolved, with its alert."""
    if Incident.objects.filter(pk=alert.pk, state__in=OPEN).update(state=State.RESOLVED, resolved_at=now) != 1:
        return False
    record(alert.pk, Kind.RESOLVED, now, detail=alert.resolved_reason, key=alert.resolved_notification_key)
    return True


# --- the operator's move --------------------------------------------------------------------

ACKNOWLEDGED, ALREADY_ACKNOWLEDGED, ALREADY_RESOLVED = "acknowledged", "already acknowledged", "already resolved"


def acknowledge(incident: Incident, *, actor: str, note: str = "", user: Any = None) -> str:
    """firing → acknowledged, with the operator's note, audited; once however often it is
    asked for. Returns ACKNOWLEDGED, or why nothing changed (the incident is refreshed then,
    so the caller can say by whom or when). It stops the reminders and is not itself
    notified: the operator who acknowledges is the one who would be told."""
    now = timezone.now()
    with transaction.atomic():
        moved = Incident.objects.filter(pk=incident.pk, state=State.FIRING).update(
            state=State.ACKNOWLEDGED, acknowledged_at=now, acknowledged_by=actor, note=note
        )
        incident.refresh_from_db()
        if moved != 1:
            return ALREADY_RESOLVED if incident.state == State.RESOLVED else ALREADY_ACKNOWLEDGED
        record(incident.pk, Kind.ACKNOWLEDGED, now, actor=actor, detail=note)
        audit.record(actor, "incident.acknowledge", incident, status_before=State.FIRING,
                     status_after=State.ACKNOWLEDGED, detail=note, user=user)
    return ACKNOWLEDGED
