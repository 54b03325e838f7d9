from __future__ import annotations

import pytest

from receipts.outbox import drain, store, tasks
from tests.clock import held_clock
from receipts.outbox.models import OutboxMessage

from .receiver import running_receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox_may_post_locally")]


def test_the_scheduled_drain_keeps_watching_for_its_time_budget(settings, monkeypatch):
    settings.OUTBOX_DRAIN_SECONDS = 5
    clock = held_clock(monkeypatch, drain)
    with running_receiver() as receiver:
        store.enqueue("http.post", {"url": receiver.url}, "k1")
        report = tasks.drain()
    # It looked again every second (on the held clock) until its budget was spent, not one pass.
    assert clock.slept and all(0 < wait <= 1 for wait in clock.slept) and sum(clock.slept) >= 4
    assert report["sent"] == 1
    assert OutboxMessage.objects.get().status == "sent"


def test_send_sends_its_own_message_and_leaves_the_others_to_the_drain():
    with running_receiver() as receiver:
        mine = store.enqueue("http.post", {"url": receiver.url}, "mine").message
        store.enqueue("http.post", {"url": receiver.url}, "other")
        report = tasks.send(mine.pk)
        assert receiver.requests == {"mine": 1}
    assert (report["claimed"], report["sent"]) == (1, 1)
    assert dict(OutboxMessage.objects.values_list("key", "status")) == {"mine": "sent", "other": "pending"}
    assert tasks.send(mine.pk)["claimed"] == 0  # already sent: a second task does nothing


@pytest.mark.parametrize("task", ["drain", "drain_due", "send"])
def test_with_outbox_drain_off_no_task_claims_a_message(settings, task):
    settings.OUTBOX_DRAIN = False
    settings.OUTBOX_DRAIN_SECONDS = 1
    message = store.enqueue("http.post", {"url": "http://127.0.0.1:9/hook"}, "k1").message
    arguments = (message.pk,) if task == "send" else ()
    assert getattr(tasks, task)(*arguments)["claimed"] == 0
    message.refresh_from_db()
    assert (message.status, message.attempts, message.claimed_by) == ("pending", 0, "")
