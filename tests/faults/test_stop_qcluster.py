"""Stop a real `manage.py qcluster` with SIGTERM mid-drain, the two ways systemd does
(docs/operations.md, "Running under systemd"): to its main process only (KillMode=mixed) and to every
one of its processes (KillMode=control-group). Either way the cluster is gone within the
bound, the send in flight finished and was recorded, what the drain had claimed but not
started was handed back, and after a restart every message is sent exactly once.

The drain in flight is the scheduled one, which would otherwise keep draining for
OUTBOX_DRAIN_SECONDS (40 s here): stopping well within that shows that it stopped early.

Unmodified django-q2 (1.11) fails both ways: a SIGTERM to the group kills the send in
flight and leaves the main process waiting forever; a SIGTERM to the main process alone
waits out the whole drain.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django_q.models import OrmQ
from django_q.tasks import async_task

from receipts.outbox.models import OutboxMessage
from receipts.outbox.store import enqueue
from tests.faults.test_kill_qcluster import Receiver
from tests.qcluster import kill_process, signal_stop, start_qcluster
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(150)]

# A deadline, not the proof: the documented units allow 90 s (TimeoutStopSec). That the cluster
# stopped early, not after the 40 s drain, shows in what was sent: only the send in flight.
STOP_BOUND = 60


@pytest.mark.parametrize("group", [True, False], ids=["control-group", "mixed"])
def test_sigterm_stops_the_cluster_after_the_send_in_flight_and_loses_nothing(tmp_path, group):
    qlog = tmp_path / "qcluster.log"
    env = {"OUTBOX_BATCH_SIZE": "2", "OUTBOX_DRAIN_SECONDS": "40", "OUTBOX_HTTP_ALLOWED_HOSTS": "127.0.0.1"}
    keys = [f"stop-msg-{i}" for i in range(4)]
    with Receiver(0, delay=2.0) as receiver:
        url = f"http://127.0.0.1:{receiver.server.server_address[1]}/hook"
        for i, key in enumerate(keys):
            enqueue("http.post", {"url": url, "json": {"message": i}}, key)
        # As if their prompt `send` tasks were lost: the scheduled drain is the one in flight.
        OrmQ.objects.all().delete()
        messages = OutboxMessage.objects.filter(key__in=keys)

        cluster = start_qcluster(qlog, **env)
        try:
            async_task("receipts.outbox.tasks.drain")
            until(lambda: receiver.requests, "a request at the receiver", within=60, log=qlog)
            in_flight = receiver.requests[0][0]
            took = signal_stop(cluster, group=group, within=STOP_BOUND)
            assert took is not None, f"still running {STOP_BOUND} s after SIGTERM\n{qlog.read_text()[-3000:]}"

            # The send in flight finished and was recorded; nothing was left in flight.
            assert [key for key, _ in receiver.requests] == [in_flight]
            assert dict(messages.values_list("key", "status")) == {
                key: "sent" if key == in_flight else "pending" for key in keys
            }
            assert set(messages.exclude(key=in_flight).values_list("attempts", flat=True)) == {0}

            cluster = start_qcluster(qlog, **env)
            async_task("receipts.outbox.tasks.drain")
            until(lambda: messages.filter(status="sent").count() == len(keys), "every message sent", within=60, log=qlog)
            assert signal_stop(cluster, group=group, within=STOP_BOUND) is not None
        finally:
            kill_process(cluster)
            connection.close()
        until(lambda: len(receiver.requests) == len(keys), "the receiver to have read every request")  # a last one may still be read

    assert sorted(key for key, _ in receiver.requests) == keys
    assert set(messages.values_list("attempts", flat=True)) == {1}


def dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_a_worker_stuck_past_its_task_timeout_is_still_killed_and_replaced(tmp_path):
    """Workers ignore SIGTERM, except the one django-q2's guard sends to a timed-out worker."""
    qlog = tmp_path / "qcluster.log"
    marker = tmp_path / "stuck.pid"
    cluster = start_qcluster(qlog, OUTBOX_HTTP_ALLOWED_HOSTS="127.0.0.1")  # the receiver; the fence refuses loopback otherwise
    try:
        async_task("tests.faults.stuck_task.stuck", str(marker), timeout=1)
        until(marker.exists, "the stuck task to start", within=30, log=qlog)
        pid = int(marker.read_text())
        until(lambda: dead(pid), f"the stuck worker {pid} to be killed", within=30, log=qlog)
        # The guard logs its "reincarnated worker ... after timeout" once the kill is sent, so
        # on a busy machine the line can land a moment after the worker is gone.
        until(lambda: "after timeout" in qlog.read_text(), "the guard's timeout line", within=30, log=qlog)
        # Its replacement works.
        with Receiver(0, delay=0) as receiver:
            enqueue("http.post", {"url": f"http://127.0.0.1:{receiver.server.server_address[1]}/hook", "json": {}}, "after-stuck")
            until(lambda: receiver.requests, "a send by the new worker", within=30, log=qlog)
        assert signal_stop(cluster, group=True, within=STOP_BOUND) is not None
    finally:
        kill_process(cluster)
        connection.close()
