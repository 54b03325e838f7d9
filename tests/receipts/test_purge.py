from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.utils import timezone

from receipts import store
from receipts.models import ArchivedReceipt, Receipt

pytestmark = pytest.mark.django_db


def old_receipts(count: int, operation: str) -> None:
    with time_machine.travel(timezone.now() - timedelta(days=8), tick=False):
        for n in range(count):
            result = store.claim("client:test", f"{operation}-{n}", operation, {})
            store.complete(store.Held("client:test", f"{operation}-{n}", result.token))


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("purge", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_deletes_in_batches_with_a_progress_bar():
    old_receipts(3, "payment.capture")
    old_receipts(2, "email.send")
    out, err = run("--batch-size", "2")
    assert "receipts.expired: 5 deleted in 3 batch(es), 3 archived" in out
    assert "receipts.expired" in err and "5/5" in err  # tqdm's bar
    assert not Receipt.objects.exists() and ArchivedReceipt.objects.count() == 3


def test_a_dry_run_reports_and_deletes_nothing():
    old_receipts(2, "email.send")
    out, _ = run("--dry-run")
    assert "receipts.expired: 2 due (dry run, nothing deleted)" in out
    assert Receipt.objects.count() == 2


def test_a_batch_size_below_one_is_refused():
    with pytest.raises(CommandError):
        run("--batch-size", "0")
