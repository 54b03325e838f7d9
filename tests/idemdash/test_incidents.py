"""Incidents (idemdash/dashboard/incidents.py): opened with the alert, reminded on a
documented count, exhausted, acknowledged once, resolved with the alert; each notification
through the outbox once, also with evaluators and operators racing (threads and processes)."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from idemdash.dashboard import alerts, incidents
from idemdash.dashboard.models import Alert, AlertRule, Incident, IncidentEvent
from receipts import store
from idemdash.core.models import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.concurrently import in_forked_processes
from tests.dashboard.build import stuck


def rule(name: str = "stuck rows") -> AlertRule:
    return AlertRule.objects.create(name=name, metric="stuck_rows", threshold=0, window_minutes=60,
                                    channel="email", target="ops@example.com")


def kinds(incident: Incident) -> list[str]:
    return list(incident.history.values_list("kind", flat=True))


def keys() -> list[str]:
    return sorted(OutboxMessage.objects.values_list("key", flat=True))


@pytest.mark.django_db
def test_an_alert_that_fires_opens_its_incident_with_the_fired_notification_in_its_history():
    rule()
    stuck("r1")
    alerts.evaluate()
    alert = Alert.objects.get()
    incident = Incident.objects.get()
    assert incident.pk == alert.pk and incident.state == "firing" and incident.evaluations == 1
    event = incident.history.get()
    assert (event.kind, event.actor, event.notification_key) == ("fired", "", f"idemdash:alert:{alert.pk}:fired")


@pytest.mark.django_db
def test_an_unacknowledged_incident_is_reminded_every_documented_count_then_exhausted_then_quiet(settings):
    settings.IDEMDASH_INCIDENT_REMIND_EVERY = 3
    settings.IDEMDASH_INCIDENT_REMINDERS = 2
    rule()
    stuck("r1")
    sent = []
    for _ in range(12):
        result = alerts.evaluate()
        sent.append(len(result.reminded))
    # Evaluation 1 opens it; the count reaches 3 at evaluation 3, 6 (reminders 1 and 2), and 9
    # (exhausted); nothing after.
    assert sent == [0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 0]
    incident = Incident.objects.get()
    assert (incident.evaluations, incident.reminders_sent) == (12, 2) and incident.exhausted_at is not None
    assert kinds(incident) == ["fired", "still_failing", "still_failing", "exhausted"]
    pk = incident.pk
    assert keys() == sorted(f"idemdash:alert:{pk}:{t}" for t in ("fired", "still_failing:1", "still_failing:2", "exhausted"))
    reminder = OutboxMessage.objects.get(key__endswith="still_failing:2")
    assert reminder.payload["subject"].startswith("[idemdash] [STILL FIRING] stuck rows: Stuck rows")
    assert "reminder 2 of 2" in reminder.payload["subject"]
    assert f"/incidents/{pk}/" in reminder.payload["body"]
    last = OutboxMessage.objects.get(key__endswith="exhausted")
    assert "no more reminders" in last.payload["subject"]


@pytest.mark.django_db
def test_recovery_resolves_the_incident_and_is_notified_acknowledged_or_not():
    r = rule()
    receipt = stuck("r1")
    alerts.evaluate()
    incident = Incident.objects.get()
    assert incidents.acknowledge(incident, actor="otto", note="looking") == incidents.ACKNOWLEDGED
    store.release(receipt, actor="otto")
    alerts.evaluate()
    incident.refresh_from_db()
    assert incident.state == "resolved" and incident.resolved_at is not None
    assert kinds(incident) == ["fired", "acknowledged", "resolved"]
    assert incident.history.get(kind="resolved").notification_key == f"idemdash:alert:{incident.pk}:resolved"
    assert OutboxMessage.objects.filter(key__endswith=":resolved").count() == 1
    assert r.alerts.get().state == "resolved"


@pytest.mark.django_db
def test_acknowledging_stops_the_reminders(settings):
    settings.IDEMDASH_INCIDENT_REMIND_EVERY = 1
    rule()
    stuck("r1")
    alerts.evaluate()
    incidents.acknowledge(Incident.objects.get(), actor="otto")
    for _ in range(5):
        assert alerts.evaluate().reminded == []
    assert OutboxMessage.objects.count() == 1  # the fired one
    assert Incident.objects.get().evaluations == 6


@pytest.mark.django_db
def test_acknowledging_twice_acknowledges_once_keeps_the_first_note_and_audits_once(django_user_model):
    user = django_user_model.objects.create_user("otto")
    rule()
    stuck("r1")
    alerts.evaluate()
    incident = Incident.objects.get()
    assert incidents.acknowledge(incident, actor="otto", note="on it", user=user) == incidents.ACKNOWLEDGED
    assert incidents.acknowledge(incident, actor="ada", note="me too") == incidents.ALREADY_ACKNOWLEDGED
    incident.refresh_from_db()
    assert (incident.state, incident.acknowledged_by, incident.note) == ("acknowledged", "otto", "on it")
    entry = AuditEntry.objects.get(action="incident.acknowledge")
    assert (entry.actor, entry.object_type, entry.object_id, entry.detail, entry.user) == (
        "otto", "idemdash_dashboard.incident", str(incident.pk), "on it", user)
    assert incident.history.filter(kind="acknowledged").count() == 1


@pytest.mark.django_db
def test_a_resolved_incident_cannot_be_acknowledged():
    receipt = stuck("r1")
    rule()
    alerts.evaluate()
    store.release(receipt, actor="otto")
    alerts.evaluate()
    incident = Incident.objects.get()
    assert incidents.acknowledge(incident, actor="otto") == incidents.ALREADY_RESOLVED
    assert not AuditEntry.objects.filter(action="incident.acknowledge").exists()
    assert Incident.objects.get().acknowledged_at is None


@pytest.mark.django_db
@pytest.mark.parametrize("name, value", [("IDEMDASH_INCIDENT_REMIND_EVERY", 0), ("IDEMDASH_INCIDENT_REMIND_EVERY", "30"),
                                         ("IDEMDASH_INCIDENT_REMINDERS", -1), ("IDEMDASH_INCIDENT_REMINDERS", True)])
def test_a_bad_reminder_setting_fails_loudly_naming_it(settings, name, value):
    setattr(settings, name, value)
    read = incidents.remind_every if name.endswith("EVERY") else incidents.reminders
    with pytest.raises(ImproperlyConfigured, match=name):
        read()


# --- races: evaluators and operators at once, each with its own connection -----------------------

PROCESSES, THREADS = 3, 4


def _evaluate(barrier, out: list) -> None:
    try:
        barrier.wait(30)
        out.append(len(alerts.evaluate().reminded))
    finally:
        connections.close_all()


def _acknowledge(barrier, out: list, actor: str) -> None:
    try:
        incident = Incident.objects.get()
        barrier.wait(30)
        out.append(incidents.acknowledge(incident, actor=actor, note=f"{actor} has it"))
    finally:
        connections.close_all()


def _threads_of(target, tag: str, go, queue) -> None:
    go.wait(30)
    out: list = []
    barrier = threading.Barrier(THREADS)
    threads = [threading.Thread(target=target, args=(barrier, out, *((f"{tag}-{n}",) if target is _acknowledge else ())))
               for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    queue.put(out)


def _race(target) -> list:
    out = in_forked_processes(_threads_of, [(target, f"p{p}") for p in range(PROCESSES)], timeout=120)
    assert len(out) == PROCESSES * THREADS
    return out


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_evaluators_racing_in_processes_and_threads_send_each_reminder_once(settings):
    # Every evaluation makes a reminder due: twelve evaluators at once may each count, but
    # each reminder number is claimed by one of them.
    settings.IDEMDASH_INCIDENT_REMIND_EVERY = 1
    settings.IDEMDASH_INCIDENT_REMINDERS = 2
    rule()
    stuck("r1")
    alerts.evaluate()
    for _ in range(3):
        _race(_evaluate)
    incident = Incident.objects.get()
    assert incident.evaluations == 1 + 3 * PROCESSES * THREADS
    assert kinds(incident) == ["fired", "still_failing", "still_failing", "exhausted"]
    assert [k.rpartition(f"{incident.pk}:")[2] for k in keys()] == ["exhausted", "fired", "still_failing:1", "still_failing:2"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_operators_racing_in_processes_and_threads_acknowledge_once_and_are_audited_once():
    rule()
    stuck("r1")
    alerts.evaluate()
    outcomes = _race(_acknowledge)
    assert sorted(outcomes).count(incidents.ACKNOWLEDGED) == 1
    assert sorted(outcomes).count(incidents.ALREADY_ACKNOWLEDGED) == PROCESSES * THREADS - 1
    incident = Incident.objects.get()
    entry = AuditEntry.objects.get(action="incident.acknowledge")
    assert entry.actor == incident.acknowledged_by and incident.note == f"{entry.actor} has it"
    assert incident.history.filter(kind="acknowledged").count() == 1
