from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from idemdash.dashboard import alerts
from idemdash.dashboard.models import Alert, AlertRule
from idemdash.devtools.models import DemoSwitch

pytestmark = pytest.mark.django_db


@pytest.fixture
def migrated(settings):
    """The demo's database as `make demo` migrates it: the default alert rules installed."""
    from tests.dashboard.test_alerts import migrated

    settings.IDEMDASH_DEFAULT_ALERTS_TO = "admin@localhost"
    migrated()


def test_it_arms_the_outage_once_and_names_the_rules_that_page_for_it(migrated):
    first, second = StringIO(), StringIO()
    call_command("demo_stage", stdout=first)
    call_command("demo_stage", stdout=second)

    assert "demo outages on: refunds" in first.getvalue() and "demo outages on" not in second.getvalue()
    assert "alert rules that page: Dead outbox messages, Dead webhook events, Failing groups, Stuck work" in second.getvalue()
    assert DemoSwitch.objects.get().failing and AlertRule.objects.count() == 4


def test_the_dead_events_rule_fires_on_a_dead_webhook_event_and_resolves_once_none_is_dead(migrated):
    from tests.webhooks.test_processing import make_event

    call_command("demo_stage", stdout=StringIO())
    event = make_event()
    alerts.evaluate()
    assert not Alert.objects.exists()

    type(event).objects.filter(pk=event.pk).update(status="dead", finished_at=event.received_at)
    alerts.evaluate()
    # Made dead by hand, not by a failure: no failure group, so only the dead events' rule fires.
    assert list(Alert.objects.filter(state="firing").values_list("rule_name", flat=True)) == ["Dead webhook events"]

    type(event).objects.filter(pk=event.pk).update(status="completed")  # reprocessed
    alerts.evaluate()
    assert set(Alert.objects.values_list("state", flat=True)) == {"resolved"}
