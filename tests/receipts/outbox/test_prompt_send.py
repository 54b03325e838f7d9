"""A message is sent as soon as its transaction commits (store.send_soon, tasks.send), without
the minute's schedule, by a real `manage.py qcluster`; and a message that its prompt task and
a scheduled drain race for is sent exactly once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from django_q.models import Schedule

from receipts.outbox import drain, store, tasks
from receipts.outbox.models import OutboxMessage
from tests.qcluster import kill_process, signal_stop, start_qcluster
from tests.waits import until

from .receiver import running_receiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.mark.slow
def test_a_message_is_sent_right_after_its_commit_with_no_schedule_installed(tmp_path):
    Schedule.objects.all().delete()  # nothing but the prompt task can send it
    qlog = tmp_path / "qcluster.log"
    with running_receiver() as receiver:
        cluster = start_qcluster(qlog, OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1")  # the receiver; the fence refuses loopback otherwise
        try:
            with transaction.atomic():
                store.enqueue("http.post", {"url": receiver.url, "json": {}}, "prompt-1")
            message = OutboxMessage.objects.filter(key="prompt-1")
            until(lambda: message.filter(status="sent").exists(), "the message sent", within=20, log=qlog)
            assert signal_stop(cluster, group=True, within=15) is not None
        finally:
            kill_process(cluster)
            connection.close()
    assert receiver.requests == {"prompt-1": 1}


def test_a_prompt_send_and_a_scheduled_drain_racing_for_each_message_send_it_once(outbox_may_post_locally):
    """For each message, its prompt task (tasks.send) and a scheduled drain's pass, each on a
    connection of its own, set off at the same moment: one of them sends it, once. One pass
    each, in threads here: the claim is the database's, whoever runs it; that a real worker
    takes the prompt task is the test above."""
    keys = [f"race-{n:02d}" for n in range(12)]
    winners: list[str] = []
    with running_receiver() as receiver:
        for n, key in enumerate(keys):
            message_id = store.enqueue("http.post", {"url": receiver.url, "json": {"n": n}}, key).message.pk
            at_once = threading.Barrier(2)

            def prompt() -> None:
                at_once.wait()
                if tasks.send(message_id)["sent"]:
                    winners.append("prompt")

            def scheduled() -> None:
                at_once.wait()
                if drain.drain(drainer="scheduled").sent:
                    winners.append("scheduled")

            in_threads(prompt, scheduled)
    assert receiver.requests == {key: 1 for key in keys}
    assert receiver.overlaps == 0
    assert len(winners) == len(keys)
    messages = OutboxMessage.objects.filter(key__in=keys)
    assert set(messages.values_list("status", flat=True)) == {"sent"}
    assert set(messages.values_list("attempts", flat=True)) == {1}


def in_threads(*steps) -> None:
    """Each step in a thread of its own, on its own connection (closed after it)."""
    failed: list[BaseException] = []

    def run(step) -> None:
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the test's thread
            failed.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(step,)) for step in steps]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a racer never finished"
    if failed:
        raise failed[0]
