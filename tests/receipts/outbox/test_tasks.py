from __future__ import annotations

import multiprocessing

import pytest

from receipts.outbox import drain, store, tasks
from tests.clock import held_clock
from receipts.outbox.models import OutboxMessage

from .receiver import running_receiver

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox_may_post_locally")]


def test_the_scheduled_drain_sends_what_is_due_and_does_not_wait_for_more(settings, monkeypatch):
    settings.OUTBOX_DRAIN_SECONDS = 5
    clock = held_clock(monkeypatch, drain)
    with running_receiver() as receiver:
        store.enqueue("http.post", {"url": receiver.url}, "k1")
        report = tasks.drain()
    # One pass: a worker held idle by a watching drain is one a webhook event waits for.
    assert clock.slept == []
    assert report["sent"] == 1
    assert OutboxMessage.objects.get().status == "sent"


def test_a_drain_yields_to_waiting_tasks_after_one_send(monkeypatch):
    waiting = multiprocessing.Queue()  # as the cluster's task queue, which the worker points it at
    monkeypatch.setattr(drain, "_others_waiting", lambda: waiting.qsize() > 0)
    with running_receiver() as receiver:
        for n in range(3):
            store.enqueue("http.post", {"url": receiver.url}, f"k{n}")
        waiting.put("a webhook event's task")
        report = tasks.drain()
        assert len(receiver.requests) == 1
    assert (report["sent"], report["released"]) == (1, 2)
    assert sorted(OutboxMessage.objects.values_list("status", "attempts")) == [
        ("pending", 0), ("pending", 0), ("sent", 1)]
    waiting.get()
    assert tasks.drain()["sent"] == 2  # nothing waits: the rest is sent


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


# What a webhook event may wait behind two long drains with two workers: the sends in flight
# (one second each here) and the cluster's poll, with room for a loaded machine. Without the
# yield it waits for a drain to end: 40 messages of a second between two drains, about 20 s.
EVENT_WAIT_BOUND = 10


@pytest.mark.slow
@pytest.mark.timeout(150)
@pytest.mark.django_db(transaction=True)
def test_a_webhook_event_waits_for_one_send_not_for_two_long_drains(client, tmp_path):
    import time

    from django.db import connection
    from django_q.models import OrmQ
    from django_q.tasks import async_task

    from tests.faults.test_kill_qcluster import Receiver
    from tests.qcluster import kill_process, signal_stop, start_qcluster
    from tests.waits import until
    from tests.webhooks.conftest import STRIPE_SECRET, deliver_stripe, make_endpoint, stripe_event
    from webhooks.models import WebhookEvent

    qlog = tmp_path / "qcluster.log"
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    with Receiver(0, delay=1.0) as receiver:
        url = f"http://127.0.0.1:{receiver.server.server_address[1]}/hook"
        for i in range(40):
            store.enqueue("http.post", {"url": url, "json": {"message": i}}, f"backlog-{i}")
        OrmQ.objects.all().delete()  # as if their prompt sends were lost: two drains take them
        cluster = start_qcluster(qlog, Q_WORKERS="2", OUTBOX_BATCH_SIZE="5", OUTBOX_DRAIN_SECONDS="60",
                                 OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1")
        try:
            async_task("receipts.outbox.tasks.drain")
            async_task("receipts.outbox.tasks.drain")
            until(lambda: len(receiver.requests) >= 2, "both drains sending", within=60, log=qlog)
            sent = time.monotonic()
            assert deliver_stripe(client, "shop", stripe_event({"n": 1}, "a.b")).status_code == 200
            until(lambda: WebhookEvent.objects.filter(status="ignored").exists(), "the event processed",
                  within=60, every=0.05, log=qlog)
            waited = time.monotonic() - sent
            print(f"the event waited {waited:.1f} s behind two drains ({len(receiver.requests)} sends so far)")
            assert waited < EVENT_WAIT_BOUND, qlog.read_text()[-3000:]
            # The drains handed back what they had claimed: the backlog is sent, once each, later.
            until(lambda: OutboxMessage.objects.filter(status="sent").count() == 40, "the backlog sent",
                  within=90, log=qlog)
            assert sorted(key for key, _ in receiver.requests) == sorted(f"backlog-{i}" for i in range(40))
            assert signal_stop(cluster, group=True, within=30) is not None
        finally:
            kill_process(cluster)
            connection.close()
