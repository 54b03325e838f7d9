from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django_q.models import Schedule

from tests.qcluster import ROOT, start_qcluster, stop_process
from tests.waits import until
from tests.webhooks.conftest import deliver_stripe, make_endpoint, stripe_event
from idemdash.devtools.models import Fulfilment
from webhooks import processing, tasks
from webhooks.models import WebhookEvent
from webhooks.schedules import SCHEDULES


@pytest.mark.django_db
def test_the_sweep_task_reports_what_it_did():
    assert tasks.sweep() == {"stuck_recovered": 0, "stuck_dead": 0, "released_held": 0, "held": 0, "enqueued": 0}


@pytest.mark.django_db
def test_the_declared_schedules_are_valid_django_q_schedules():
    for entry in SCHEDULES:
        schedule, _ = Schedule.objects.update_or_create(name=entry["name"], defaults=entry)
        schedule.full_clean()
    sweep = Schedule.objects.get(name="webhooks.sweep")
    assert (sweep.func, sweep.schedule_type, sweep.minutes) == ("webhooks.tasks.sweep", "I", 1)


@pytest.mark.django_db
def test_the_task_timeout_is_below_the_broker_retry_and_a_lease_that_cannot_be_renewed():
    assert settings.Q_CLUSTER["timeout"] < settings.Q_CLUSTER["retry"]
    if connection.vendor == "sqlite":  # no renewal there (processing.lease_seconds says why)
        assert settings.Q_CLUSTER["timeout"] < processing.lease_seconds()
    else:  # renewed while the handler runs, so short
        assert processing.lease_seconds() == settings.WEBHOOKS_LEASE_SECONDS == 20


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_real_qcluster_processes_a_received_event(client):
    secret = "whsec_qcluster_test_000000000"
    make_endpoint("shop", "stripe", secret)
    intent = {"id": "pi_qcluster_1", "object": "payment_intent", "amount": 700, "currency": "eur"}
    log_path = ROOT / "var" / "test-qcluster.log"
    log_path.unlink(missing_ok=True)
    worker = start_qcluster(log_path)
    try:
        response = deliver_stripe(client, "shop", stripe_event(intent, "payment_intent.succeeded"), secret=secret)
        assert response.status_code == 200
        event_id = response.json()["event"]

        def completed() -> bool:
            assert worker.poll() is None, log_path.read_text()[-3000:]
            return WebhookEvent.objects.get(pk=event_id).status == "completed"

        until(completed, "the event completed by the cluster", within=60, log=log_path)
        assert Fulfilment.objects.get().payment_id == "pi_qcluster_1"
    finally:
        stop_process(worker)
        connection.close()
