from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time

import pytest
from django.db import connections
from django.utils import timezone

from receipts.outbox import store
from receipts.outbox.drain import drain
from receipts.outbox.models import OutboxAttempt, OutboxMessage

from tests.clock import held_clock

from .receiver import running_receiver

FORK = multiprocessing.get_context("fork")

# The receiver is on 127.0.0.1; a forked drainer inherits the allow-list.
pytestmark = pytest.mark.usefixtures("outbox_may_post_locally")


def enqueue_posts(url: str, count: int) -> list[str]:
    keys = [f"msg-{n:04d}" for n in range(count)]
    for n, key in enumerate(keys):
        store.enqueue("http.post", {"url": url, "json": {"n": n}}, key)
    return keys


def statuses() -> dict[str, str]:
    return dict(OutboxMessage.objects.values_list("key", "status"))


@pytest.mark.django_db
def test_a_drain_sends_every_due_message_and_logs_each_attempt():
    with running_receiver() as receiver:
        keys = enqueue_posts(receiver.url, 3)
        report = drain()
    assert (report.claimed, report.sent) == (3, 3)
    assert set(statuses().values()) == {"sent"}
    assert receiver.requests == {key: 1 for key in keys}
    attempt = OutboxAttempt.objects.get(key="msg-0000")
    assert (attempt.outcome, attempt.status_code, attempt.number) == ("sent", 200, 1)
    assert attempt.duration_ms is not None


@pytest.mark.django_db
def test_a_drain_retries_a_503_and_kills_a_404():
    def policy(key, nth, body):
        return (503, {"Retry-After": "60"}, 0) if key == "msg-0000" else (404, {}, 0)

    with running_receiver(policy) as receiver:
        enqueue_posts(receiver.url, 2)
        report = drain()
    assert (report.retried, report.dead) == (1, 1)
    assert statuses() == {"msg-0000": "retry", "msg-0001": "dead"}
    retrying = OutboxMessage.objects.get(key="msg-0000")
    assert (retrying.next_attempt_at - timezone.now()).total_seconds() > 59
    assert OutboxMessage.objects.get(key="msg-0001").last_error.startswith("HTTP 404")


@pytest.mark.django_db
def test_an_action_that_crashes_is_retried_not_raised(settings):
    from receipts.outbox import actions

    @actions.outbox_action("test.crash")
    def crash(payload, ctx):
        raise KeyError("bug")

    try:
        store.enqueue("test.crash", {}, "crashy")
        assert drain().retried == 1
    finally:
        actions._registry.pop("test.crash")
    assert "KeyError" in OutboxMessage.objects.get().last_error


@pytest.mark.django_db
def test_a_requeued_dead_message_is_sent_by_the_next_drain():
    def policy(key, nth, body):
        return (410, {}, 0) if nth == 1 else (200, {}, 0)

    with running_receiver(policy) as receiver:
        enqueue_posts(receiver.url, 1)
        drain()
        store.send_again(OutboxMessage.objects.get(), actor="alice")
        drain()
    assert statuses() == {"msg-0000": "sent"}
    assert receiver.requests == {"msg-0000": 2}


@pytest.mark.django_db
def test_a_drain_out_of_time_releases_what_it_claimed_but_did_not_start(monkeypatch):
    from receipts.outbox import drain as drain_module

    clock = held_clock(monkeypatch, drain_module)

    def a_second_per_post(key, nth, body):
        clock.advance(1.0)  # each post takes a second, by the drain's clock: past its half
        return 200, {}, 0.0

    with running_receiver(a_second_per_post) as receiver:
        enqueue_posts(receiver.url, 4)
        report = drain(max_seconds=0.5, batch_size=4)
    assert report.sent == 1 and report.released == 3
    assert sorted(statuses().values()) == ["pending", "pending", "pending", "sent"]


# --- Several drainer processes ------------------------------------------------------------


def _drain_until_settled(deadline: float) -> None:
    """A drainer process: drain until every message is settled or the deadline passes."""
    try:
        while time.time() < deadline:
            drain(max_seconds=2)
            if not OutboxMessage.objects.exclude(status__in=["sent", "dead"]).exists():
                break
            time.sleep(0.02)
    finally:
        connections.close_all()


def _flaky(key: str, nth: int, body: object) -> tuple[int, dict, float]:
    # Deterministic per (key, attempt): about 30% of requests fail with 503, never the
    # fourth and later ones, so every message settles well inside the attempt limit.
    rng = random.Random(f"{key}:{nth}")
    hold = 0.005 + rng.random() * 0.01  # long enough for a concurrent double send to overlap
    if nth <= 3 and rng.random() < 0.3:
        return 503, {}, hold
    return 200, {}, hold


def run_drainers(settings, count: int, processes: int = 4) -> None:
    settings.OUTBOX_BACKOFF_BASE_SECONDS = 0.05
    settings.OUTBOX_BACKOFF_CAP_SECONDS = 0.4
    settings.OUTBOX_BATCH_SIZE = 5
    with running_receiver(_flaky) as receiver:
        keys = enqueue_posts(receiver.url, count)
        connections.close_all()  # children must open their own connections
        deadline = time.time() + 60
        drainers = [FORK.Process(target=_drain_until_settled, args=(deadline,)) for _ in range(processes)]
        for p in drainers:
            p.start()
        for p in drainers:
            p.join(timeout=75)
        assert [p.exitcode for p in drainers] == [0] * processes

    # Every message sent, none lost.
    assert statuses() == {key: "sent" for key in keys}
    # Exactly one successful request per key, and never two requests for one key at once.
    assert receiver.successes == {key: 1 for key in keys}
    assert receiver.overlaps == 0
    # Each retry carried the same key as the first try (the body names the message).
    assert len(receiver.keys_by_body) == count
    assert all(len(seen) == 1 for seen in receiver.keys_by_body.values())
    # The receiver really did fail about 30% of requests, so there were retries to check.
    total = sum(receiver.requests.values())
    assert 0.15 < receiver.statuses[503] / total < 0.45
    # Every request the receiver saw is an attempt in the log, and vice versa.
    for message in OutboxMessage.objects.all():
        assert message.attempts == receiver.requests[message.key]
        assert message.attempt_log.count() == receiver.requests[message.key]
    assert not OutboxAttempt.objects.filter(outcome="stale").exists()
    assert OutboxAttempt.objects.values("drainer").distinct().count() > 1


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_four_drainer_processes_send_every_message_once_despite_503s_on_postgres(settings):
    run_drainers(settings, count=240)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_four_drainer_processes_send_every_message_once_despite_503s(settings):
    run_drainers(settings, count=60)


# --- A drainer killed mid-batch -------------------------------------------------------------


def _drain_once() -> None:
    try:
        drain(batch_size=10)
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_messages_of_a_drainer_killed_mid_batch_are_sent_after_its_lease_expires(settings):
    settings.OUTBOX_LEASE_SECONDS = 3
    arrived, let_go = threading.Event(), threading.Event()

    def stall_first_try_of_first_message(key, nth, body):
        if key == "msg-0000" and nth == 1:
            arrived.set()
            let_go.wait(20)
        return 200, {}, 0

    with running_receiver(stall_first_try_of_first_message) as receiver:
        keys = enqueue_posts(receiver.url, 4)
        connections.close_all()
        drainer = FORK.Process(target=_drain_once)
        drainer.start()
        try:
            assert arrived.wait(20), "the drainer never sent its first message"
            os.kill(drainer.pid, signal.SIGKILL)
            drainer.join(10)
            assert drainer.exitcode == -signal.SIGKILL

            # The whole batch is stranded in flight, and its lease still holds it.
            assert set(statuses().values()) == {"in_flight"}
            assert drain().claimed == 0

            lease_end = max(OutboxMessage.objects.values_list("lease_expires_at", flat=True))
            time.sleep(max(0.0, (lease_end - timezone.now()).total_seconds()) + 0.1)
            report = drain()
        finally:
            let_go.set()
    assert report.sent == 4
    assert statuses() == {key: "sent" for key in keys}
    # The killed drainer's request did reach the receiver: delivery is at least once, and
    # the second delivery carried the same key, so the receiver can tell.
    assert receiver.requests == {"msg-0000": 2, "msg-0001": 1, "msg-0002": 1, "msg-0003": 1}
    assert OutboxMessage.objects.get(key="msg-0000").attempts == 2


# --- Drainers with different registries on one table ---------------------------------------


def register_for_test(name: str) -> None:
    """Registers `name` in this process (and in the drainers it forks afterwards): an action
    that posts its payload's url, as a host's own action might."""
    from receipts.outbox import actions

    actions.outbox_action(name)(lambda payload, ctx: actions.http_post(payload, ctx))


def _drain_with_registry(unregister: list[str], results) -> None:
    """A drainer process whose registry lacks the actions in `unregister`: it drains for
    three seconds, looking again when nothing is due. (Once was not enough on MariaDB: InnoDB
    locks every row a scan reads, the neighbour's included, and SKIP LOCKED passes over them,
    so a drainer could find its own messages held and end its run; the next run, a moment
    later in production, sends them.)"""
    from receipts.outbox import actions

    try:
        for name in unregister:
            actions._registry.pop(name)
        report = drain(max_seconds=3, idle_wait=0.05, batch_size=3)
        results.put((sorted(actions.registered()), report.claimed, report.sent, report.retried))
    finally:
        connections.close_all()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_drainer_processes_with_different_registries_each_claim_only_their_own_actions():
    # One table, two projects draining it at once: the host's worker knows host.ship,
    # idemdash's does not, and idemdash's knows idemdash.only, which the host lacks. Neither
    # claims the other's messages, so none is failed as unknown or sent twice.
    from receipts.outbox import actions

    register_for_test("host.ship")
    register_for_test("idemdash.only")
    try:
        with running_receiver() as receiver:
            for n in range(12):
                store.enqueue("host.ship", {"url": receiver.url, "json": {"n": n}}, f"host-{n}")
                store.enqueue("idemdash.only", {"url": receiver.url, "json": {"n": n}}, f"idemdash-{n}")
            connections.close_all()
            results = FORK.Queue()
            drainers = [FORK.Process(target=_drain_with_registry, args=([lacking], results))
                        for lacking in ("host.ship", "idemdash.only")]
            for p in drainers:
                p.start()
            for p in drainers:
                p.join(40)
            assert [p.exitcode for p in drainers] == [0, 0]
            reports = {tuple(registry): (claimed, sent, retried)
                       for registry, claimed, sent, retried in (results.get(timeout=5) for _ in drainers)}
        # Each drainer claimed and sent exactly the twelve messages of its own action.
        assert sorted(reports.values()) == [(12, 12, 0), (12, 12, 0)]
        assert set(statuses().values()) == {"sent"}
        assert receiver.requests == {**{f"host-{n}": 1 for n in range(12)}, **{f"idemdash-{n}": 1 for n in range(12)}}
        assert set(OutboxMessage.objects.values_list("attempts", flat=True)) == {1}
        assert not OutboxAttempt.objects.exclude(outcome="sent").exists()
        drainers_by_action = {
            action: set(OutboxAttempt.objects.filter(message__action=action).values_list("drainer", flat=True))
            for action in ("host.ship", "idemdash.only")
        }
        assert [len(names) for names in drainers_by_action.values()] == [1, 1]
        assert drainers_by_action["host.ship"] != drainers_by_action["idemdash.only"]
    finally:
        actions._registry.pop("host.ship")
        actions._registry.pop("idemdash.only")


@pytest.mark.django_db
def test_a_message_for_an_action_this_drainer_does_not_know_stays_pending_for_a_drainer_that_does():
    from receipts.outbox import actions

    register_for_test("test.newer")
    try:
        store.enqueue("test.newer", {}, "from-new-code")
    finally:
        actions._registry.pop("test.newer")
    assert drain().claimed == 0
    message = OutboxMessage.objects.get()
    assert (message.status, message.attempts, message.last_error) == ("pending", 0, "")


@pytest.mark.django_db
def test_a_drain_whose_worker_is_stopping_finishes_the_send_in_flight_and_hands_back_the_rest(monkeypatch):
    from receipts.outbox import drain as drain_module

    stopping = []
    monkeypatch.setattr(drain_module, "_stopping", lambda: bool(stopping))

    def policy(key, nth, body):
        stopping.append(True)  # the worker is told to stop while the first message is sent
        return (200, {}, 0)

    clock = held_clock(monkeypatch, drain_module)
    with running_receiver(policy) as receiver:
        keys = enqueue_posts(receiver.url, 3)
        report = drain(max_seconds=30, idle_wait=1)
    assert clock.slept == []  # it returned at once, not after looking again for its 30 s
    assert (report.claimed, report.sent, report.released) == (3, 1, 2)
    assert statuses() == {keys[0]: "sent", keys[1]: "pending", keys[2]: "pending"}
    assert set(OutboxMessage.objects.filter(status="pending").values_list("attempts", flat=True)) == {0}
