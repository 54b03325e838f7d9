from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from receipts import rollup, store, tasks
from receipts.models import AttemptHourly, Receipt

pytestmark = pytest.mark.django_db


def test_the_scheduled_purge_runs_every_purger():
    with time_machine.travel(timezone.now() - timedelta(days=3), tick=False):
        store.claim("client:t", "k", "email.send", {})
    results = {r["name"]: r for r in tasks.purge()}
    assert results["receipts.expired"]["deleted"] == 1
    assert {"receipts.attempts", "outbox.sent", "outbox.dead", "outbox.attempts"} <= set(results)
    assert not Receipt.objects.exists()


def test_the_scheduled_roll_up_catches_up_on_its_first_run():
    with time_machine.travel(timezone.now() - timedelta(days=20), tick=False):
        store.claim("client:t", "k", "email.send", {})
    runs = tasks.roll_up()
    assert runs[-1]["caught_up"] and len(runs) > 1  # 20 days: several bounded runs
    assert AttemptHourly.objects.get().count == 1
    assert rollup.ATTEMPTS.rolled_until() is not None
