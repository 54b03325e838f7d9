from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection
from django_q.models import Schedule

from webhooks import processing, tasks
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
