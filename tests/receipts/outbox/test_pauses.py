"""receipts/outbox/pauses.py: pausing sending for an action or a destination host, on the
database the run is configured for (SQLite by default; PostgreSQL and MariaDB with
DATABASE_URL). Drains run for real, in this process and in forked drainer processes with
their own connections, against a local receiver that counts what arrives."""

from __future__ import annotations

import multiprocessing
import threading

import pytest
from django.db import connection, connections, transaction
from django_q.models import OrmQ, Schedule

from idemdash.core.audit import AuditEntry
from receipts.outbox import pauses, store
from receipts.outbox.drain import drain
from receipts.outbox.models import OutboxMessage, OutboxPause

from tests.qcluster import TICK, kill_process, processed, signal_stop, start_qcluster
from tests.waits import until

from .receiver import running_receiver

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def two_local_hosts(settings) -> None:
    # One receiver, reached by two names: "127.0.0.1" and "localhost" are two destination hosts.
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1", "localhost"]


def posts(url: str, prefix: str, count: int) -> list[str]:
    keys = [f"{prefix}-{n:03d}" for n in range(count)]
    for n, key in enumerate(keys):
        store.enqueue("http.post", {"url": url, "json": {"n": n, "to": prefix}}, key)
    return keys


def statuses(prefix: str) -> set[str]:
    return set(OutboxMessage.objects.filter(key__startswith=prefix).values_list("status", flat=True))


def drain_tasks() -> int:
    return sum(1 for q in OrmQ.objects.all() if q.task["func"] == pauses.DRAIN_TASK)


@pytest.mark.django_db
def test_enqueue_records_the_host_an_http_post_goes_to_in_lower_case():
    message = store.enqueue("http.post", {"url": "https://API.Example.com:8443/hook"}, "k1").message
    assert message.destination_host == "api.example.com"
    assert store.enqueue("email.send", {"to": "a@example.com", "subject": "s", "body": "b"}, "k2").message.destination_host == ""


@pytest.mark.django_db
def test_pausing_twice_writes_one_row_and_one_audit_entry_and_resuming_twice_one_more():
    store.enqueue("http.post", {"url": "https://api.example.com/hook"}, "sent-there")
    OutboxMessage.objects.update(status="sent")  # a host the outbox sends to, nothing waiting
    assert pauses.pause("host", "API.example.com", actor="ops", note="their 403s") is True
    assert pauses.pause("host", "api.example.com", actor="ops2") is False
    row = OutboxPause.objects.get()
    assert (row.kind, row.target, row.paused_by, row.note) == ("host", "api.example.com", "ops", "their 403s")
    assert pauses.resume("host", "api.example.com", actor="ops") is True
    assert pauses.resume("host", "api.example.com", actor="ops") is False
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "actor", "detail"))
    assert entries == [
        ("outbox_pause.pause", "ops", "destination host api.example.com: their 403s"),
        ("outbox_pause.resume", "ops", "destination host api.example.com: 0 waiting messages to send"),
    ]
    assert not OutboxPause.objects.exists()


@pytest.mark.parametrize("kind, target", [
    ("host", ""), ("host", "https://x.example/path"), ("host", "a b"), ("host", "x" * 300), ("host", "ex\u202eample"),
    ("action", ""), ("action", "http post"), ("action", "a" * 101), ("endpoint", "stripe"), ("", "x"),
])
@pytest.mark.django_db
def test_a_pause_of_something_that_is_not_a_name_is_refused_and_writes_nothing(kind, target):
    with pytest.raises(pauses.InvalidPause):
        pauses.pause(kind, target, actor="ops")
    with pytest.raises(pauses.InvalidPause):
        pauses.resume(kind, target, actor="ops")
    assert not OutboxPause.objects.exists() and not AuditEntry.objects.exists()


@pytest.mark.django_db
def test_a_paused_host_keeps_its_messages_and_the_others_are_sent(two_local_hosts, django_capture_on_commit_callbacks):
    with running_receiver() as receiver:
        pauses.pause("host", "127.0.0.1", actor="ops")
        held = posts(receiver.url, "held", 3)  # http://127.0.0.1:port/
        other = posts(receiver.url.replace("127.0.0.1", "localhost"), "other", 2)
        report = drain()
        assert report.sent == 2 and statuses("held") == {"pending"}
        assert set(receiver.requests) == set(other)
        [backlog] = pauses.paused()
        assert backlog.waiting == 3 and backlog.oldest is not None

        with django_capture_on_commit_callbacks(execute=True):
            assert pauses.resume("host", "127.0.0.1", actor="ops") is True
        assert drain_tasks() == 1  # the worker is asked to drain at once
        assert drain().sent == 3
    assert receiver.requests == {key: 1 for key in held + other}


@pytest.mark.django_db
def test_a_paused_action_is_not_claimed_even_when_its_ids_are_asked_for(two_local_hosts):
    with running_receiver() as receiver:
        keys = posts(receiver.url, "m", 2)
        pauses.pause("action", "http.post", actor="ops")
        ids = list(OutboxMessage.objects.values_list("id", flat=True))
        # tasks.send(id) drains with `ids`: a pause still wins.
        assert drain(ids=ids).claimed == 0
        # Made due now by an operator, it still waits.
        store.send_now(OutboxMessage.objects.get(key=keys[0]), actor="ops")
        assert drain().claimed == 0 and statuses("m") == {"pending"}
        pauses.resume("action", "http.post", actor="ops")
        assert drain().sent == 2
    assert receiver.requests == {key: 1 for key in keys}


@pytest.mark.django_db
def test_a_retry_waiting_behind_a_pause_keeps_its_attempts(two_local_hosts):
    def fail_first(key, nth, body):
        return (503, {}, 0) if nth == 1 else (200, {}, 0)

    with running_receiver(fail_first) as receiver:
        [key] = posts(receiver.url, "r", 1)
        assert drain().retried == 1
        pauses.pause("host", "127.0.0.1", actor="ops")
        OutboxMessage.objects.update(next_attempt_at=OutboxMessage.objects.get().created_at)  # due
        assert drain().claimed == 0
        pauses.resume("host", "127.0.0.1", actor="ops")
        assert drain().sent == 1
    message = OutboxMessage.objects.get()
    assert (message.status, message.attempts, receiver.requests[key]) == ("sent", 2, 2)


@pytest.mark.django_db(transaction=True)
def test_operators_pausing_at_once_from_eight_threads_write_one_pause_and_one_audit_entry():
    barrier = threading.Barrier(8)
    results = []

    def pause() -> None:
        try:
            barrier.wait(10)
            results.append(pauses.pause("action", "http.post", actor="ops"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=pause) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(results) == [False] * 7 + [True]
    assert OutboxPause.objects.count() == 1
    assert AuditEntry.objects.filter(action="outbox_pause.pause").count() == 1


def _drain_for(seconds: float) -> None:
    """A drainer process: drains for `seconds`, looking again every 50 ms when nothing is due."""
    try:
        drain(max_seconds=seconds, idle_wait=0.05, batch_size=4)
    finally:
        connections.close_all()


def _drainers(processes: int, seconds: float) -> None:
    connections.close_all()  # children must open their own connections
    drainers = [FORK.Process(target=_drain_for, args=(seconds,)) for _ in range(processes)]
    for p in drainers:
        p.start()
    for p in drainers:
        p.join(seconds + 30)
    assert [p.exitcode for p in drainers] == [0] * processes


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_drainer_processes_send_nothing_of_a_paused_host_and_everything_once_after_resume(two_local_hosts):
    with running_receiver() as receiver:
        pauses.pause("host", "127.0.0.1", actor="ops")
        held = posts(receiver.url, "held", 24)
        other = posts(receiver.url.replace("127.0.0.1", "localhost"), "other", 8)
        # Three drainers, with their own connections, keep looking while the host is paused:
        # the other host's messages go (as many rounds as a loaded machine needs, at most 10),
        # and a round more sends none of the paused host's.
        for _ in range(10):
            _drainers(3, 2.0)
            if set(receiver.requests) == set(other):
                break
        _drainers(3, 1.0)
        assert set(receiver.requests) == set(other)
        assert statuses("held") == {"pending"} and statuses("other") == {"sent"}
        assert pauses.paused()[0].waiting == 24

        assert pauses.resume("host", "127.0.0.1", actor="ops") is True
        for _ in range(10):
            _drainers(3, 2.0)
            if statuses("held") == {"sent"}:
                break
    assert statuses("held") == {"sent"}
    assert receiver.requests == {key: 1 for key in held + other}
    assert receiver.overlaps == 0
    assert set(OutboxMessage.objects.values_list("attempts", flat=True)) == {1}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_running_worker_sends_nothing_of_a_paused_host_and_drains_it_after_resume(tmp_path, settings):
    # A real `manage.py qcluster`: each enqueue asks it to send (tasks.send), its ticks drain
    # every few seconds; none of that sends a paused host's messages. Resuming asks it to
    # drain (tasks.drain), with no schedule installed.
    Schedule.objects.all().delete()
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]  # as the cluster's: a host the outbox may send to
    qlog = tmp_path / "qcluster.log"
    with running_receiver() as receiver:
        pauses.pause("host", "127.0.0.1", actor="ops")
        cluster = start_qcluster(qlog, OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1")
        try:
            with transaction.atomic():
                keys = posts(receiver.url, "held", 10)
            # The send tasks ran, then a tick (its drain): nothing sent.
            until(lambda: processed(qlog, "receipts.outbox.tasks.send") == 10, "the send tasks run", log=qlog)
            ticks = processed(qlog, TICK)
            until(lambda: processed(qlog, TICK) > ticks, "a tick after the send tasks", log=qlog)
            assert receiver.requests == {} and statuses("held") == {"pending"}

            pauses.resume("host", "127.0.0.1", actor="ops")
            until(lambda: statuses("held") == {"sent"}, "the backlog sent", log=qlog)
            assert signal_stop(cluster, group=True, within=15) is not None
        finally:
            kill_process(cluster)
            connection.close()
    assert receiver.requests == {key: 1 for key in keys}


@pytest.mark.django_db
def test_only_what_can_be_sent_can_be_paused_and_a_refusal_lists_what_can():
    with pytest.raises(pauses.InvalidPause) as typo:
        pauses.pause("action", "http.psot", actor="ops")
    assert "http.psot is not a registered action. These are: " in str(typo.value)
    assert "email.send" in str(typo.value) and "http.post" in str(typo.value)
    with pytest.raises(pauses.InvalidPause) as unknown:
        pauses.pause("host", "partner.example.com", actor="ops")
    assert str(unknown.value) == "partner.example.com is not a host the outbox sends to. There is none yet."
    store.enqueue("http.post", {"url": "https://api.example.com/hook"}, "k1")
    with pytest.raises(pauses.InvalidPause) as listed:
        pauses.pause("host", "partner.example.com", actor="ops")
    assert str(listed.value).endswith("These are: api.example.com.")
    assert not OutboxPause.objects.exists() and not AuditEntry.objects.exists()
    assert pauses.pause("host", "api.example.com", actor="ops") and pauses.pause("action", "http.post", actor="ops")


@pytest.mark.django_db
def test_a_host_the_settings_allow_can_be_paused_before_anything_was_sent_to_it(settings):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["Partner.example.com"]
    assert pauses.pause("host", "partner.example.com", actor="ops") is True
