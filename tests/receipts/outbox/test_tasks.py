from __future__ import annotations

import time

import pytest

from receipts.outbox import store, tasks
from receipts.outbox.models import OutboxMessage

from .receiver import running_receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox_may_post_locally")]


def test_the_scheduled_drain_keeps_watching_for_its_time_budget(settings):
    settings.OUTBOX_DRAIN_SECONDS = 1
    with running_receiver() as receiver:
        store.enqueue("http.post", {"url": receiver.url}, "k1")
        started = time.monotonic()
        report = tasks.drain()
        assert time.monotonic() - started >= 0.9  # it waited for more work, not just one pass
    assert report["sent"] == 1
    assert OutboxMessage.objects.get().status == "sent"
