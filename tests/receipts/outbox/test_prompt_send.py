"""With a real `manage.py qcluster` running: a message is sent as soon as its transaction
commits (store.send_soon, tasks.send), without the minute's schedule, and a message that
the prompt task and scheduled drains race for is sent exactly once."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django_q.brokers import get_broker
from django_q.models import Schedule
from django_q.tasks import async_task

from receipts.outbox import drain, store
from receipts.outbox.models import OutboxAttempt, OutboxMessage
from tests.concurrently import in_a_thread
from tests.faults.test_kill_qcluster import wait_for
from tests.qcluster import kill_process, signal_stop, start_qcluster

from .receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_message_is_sent_right_after_its_commit_with_no_schedule_installed(tmp_path):
    Schedule.objects.all().delete()  # nothing but the prompt task can send it
    qlog = tmp_path / "qcluster.log"
    with running_receiver() as receiver:
        cluster = start_qcluster(qlog, OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1")  # the receiver; the fence refuses loopback otherwise
        try:
            with transaction.atomic():
                store.enqueue("http.post", {"url": receiver.url, "json": {}}, "prompt-1")
            message = OutboxMessage.objects.filter(key="prompt-1")
            wait_for(lambda: message.filter(status="sent").exists(), 20, "the message sent", qlog)
            assert signal_stop(cluster, group=True, within=15) is not None
        finally:
            kill_process(cluster)
            connection.close()
    assert receiver.requests == {"prompt-1": 1}


def test_prompt_tasks_and_scheduled_drains_racing_send_each_message_exactly_once(tmp_path, outbox_may_post_locally):
    qlog = tmp_path / "qcluster.log"
    keys = [f"race-{n:02d}" for n in range(30)]
    with running_receiver(lambda key, nth, body: (200, {}, 0.05)) as receiver:
        cluster = start_qcluster(qlog, OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1", Q_WORKERS="3", OUTBOX_DRAIN_SECONDS="10", OUTBOX_BATCH_SIZE="3")
        stop = threading.Event()

        def drain_here() -> None:  # one more drainer, in this process, on its own connection
            while not stop.is_set():
                drain.drain()
                time.sleep(0.01)

        try:
            async_task("receipts.outbox.tasks.drain")  # what the minute's schedule runs
            # The race needs the cluster up: on a loaded machine it can take seconds to start,
            # and this process's drainer alone would then send every message.
            wait_for(lambda: get_broker().queue_size() == 0, 30, "the cluster took its first task", qlog)
            with in_a_thread(drain_here, stop, join=30):
                for n, key in enumerate(keys):
                    store.enqueue("http.post", {"url": receiver.url, "json": {"n": n}}, key)
                    if n % 10 == 0:
                        async_task("receipts.outbox.tasks.drain")
                messages = OutboxMessage.objects.filter(key__in=keys)
                wait_for(lambda: messages.filter(status="sent").count() == len(keys), 60, "every message sent", qlog)
                assert signal_stop(cluster, group=True, within=20) is not None
        finally:
            kill_process(cluster)
            connection.close()
    assert receiver.requests == {key: 1 for key in keys}
    assert receiver.overlaps == 0
    assert set(messages.values_list("attempts", flat=True)) == {1}
    # The race was real: the cluster's workers and this process each sent some.
    processes = {drainer.split(":")[1] for drainer in OutboxAttempt.objects.values_list("drainer", flat=True)}
    assert len(processes) >= 2
