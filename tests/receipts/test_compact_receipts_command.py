"""receipts/management/commands/compact_receipts.py: the schedule's work on demand."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from receipts import store
from receipts.models import Receipt


@pytest.mark.django_db
def test_it_compacts_what_is_due_and_says_how_much(settings):
    settings.RECEIPTS_OPERATIONS = {"export.run": {"compact_after_seconds": 60}}
    with time_machine.travel(timezone.now() - timedelta(hours=1), tick=False):
        for n in range(3):
            claim = store.claim("client:t", f"k{n}", "export.run", {"n": n})
            store.complete(store.Held("client:t", f"k{n}", claim.token), body='{"ok": true}')
    out = StringIO()
    call_command("compact_receipts", "--batch-size", "2", stdout=out)
    assert out.getvalue() == "export.run: 3 compacted in 2 batch(es)\n"
    assert not Receipt.objects.filter(compacted_at=None).exists()


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(CommandError, match="at least 1"):
        call_command("compact_receipts", "--batch-size", "0")
