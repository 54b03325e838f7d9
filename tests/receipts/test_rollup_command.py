from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone

from idemdash.core import rollup as core_rollup
from receipts import rollup, store
from receipts.models import AttemptHourly

pytestmark = pytest.mark.django_db


def claim_days_ago(key: str, days: int) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=days), tick=False):
        store.claim("client:t", key, "email.send", {})


def test_it_backfills_the_whole_log_at_once():
    claim_days_ago("old", 30)
    claim_days_ago("new", 1)
    out = StringIO()
    before = timezone.now()
    call_command("rollup", stdout=out)
    assert AttemptHourly.objects.count() == 2
    settled = rollup.ATTEMPTS.rolled_until()
    assert core_rollup.floor_minute(before - core_rollup.SETTLE) <= settled <= timezone.now() - core_rollup.SETTLE
    assert "rolled up until" in out.getvalue()


def test_rebuild_recounts_from_the_log():
    claim_days_ago("k", 2)
    call_command("rollup", stdout=StringIO())
    AttemptHourly.objects.update(count=99)  # a roll-up gone wrong
    call_command("rollup", "--rebuild", stdout=StringIO())
    assert list(AttemptHourly.objects.values_list("count", flat=True)) == [1]
