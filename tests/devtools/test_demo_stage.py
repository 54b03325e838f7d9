from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from idemdash.dashboard import alerts
from idemdash.dashboard.models import Alert, AlertRule
from idemdash.devtools.models import DemoSwitch

pytestmark = pytest.mark.django_db


def test_it_installs_the_alert_rule_once_however_often_it_runs():
    first, second = StringIO(), StringIO()
    call_command("demo_stage", stdout=first)
    call_command("demo_stage", stdout=second)

    assert "alert rule 'Demo: dead webhook events' installed" in first.getvalue()
    assert "already there; left as it is" in second.getvalue()
    assert AlertRule.objects.count() == 1
    assert DemoSwitch.objects.get().failing


def test_its_rule_fires_on_a_dead_webhook_event_and_resolves_once_none_is_dead():
    from tests.webhooks.test_processing import make_event

    call_command("demo_stage", stdout=StringIO())
    event = make_event()
    alerts.evaluate()
    assert not Alert.objects.exists()

    type(event).objects.filter(pk=event.pk).update(status="dead", finished_at=event.received_at)
    alerts.evaluate()
    assert Alert.objects.get().state == "firing"

    type(event).objects.filter(pk=event.pk).update(status="completed")  # reprocessed
    alerts.evaluate()
    assert Alert.objects.get().state == "resolved"
