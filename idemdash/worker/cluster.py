"""A django-q2 cluster that stops cleanly whether SIGTERM reaches only its main process
(systemd's KillMode=mixed, `kill PID`) or every one of its processes at once
(KillMode=control-group, `kill -- -PGID`, most process supervisors).

Why django-q2 alone hangs then: its sentinel process resets SIGTERM to the default action,
and the worker, pusher and monitor processes that it forks inherit that. A SIGTERM to the
whole group kills all of them on the spot, the task in flight included, while the main
process, in its own handler, sets the stop event that the dead sentinel was waiting on. A
multiprocessing Event.set waits for each waiter to acknowledge the wake-up, and a dead
waiter never does: the main process waits forever.

Here only the main process acts on SIGTERM, and the others ignore it. The main process sets
the stop event, and the sentinel stops the cluster as django-q2 does on Ctrl-C (the pusher
first, then a STOP queued behind the tasks already handed over, then the monitor, which
acknowledges what the workers finished). It also raises a flag in memory shared with every
process of the cluster, read without a lock, by which a long task (the outbox drain) ends
at its next unit of work rather than running out its time.

One exception keeps django-q2's timeout working: its guard sends SIGTERM to a worker whose
task overran the timeout (the worker's timer reads 0), and that worker still dies.

This relies on django-q2 internals (Sentinel's `start` argument, the `timer` on each worker
process, Cluster's events and its start()); tests/idemdash/test_worker_cluster.py checks
them and names the django-q2 version when they change.
"""

from __future__ import annotations

import ctypes
import os
import signal
import uuid
from multiprocessing import Event, RawValue, current_process
from time import sleep
from types import FrameType
from typing import Any

from django_q import cluster as django_q_cluster
from django_q.conf import logger, setproctitle

from receipts.outbox import drain


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # In the sentinel and in every process it forks. No logging and no locks: the signal
    # may land while this process holds the lock that they would take.
    timer = getattr(current_process(), "timer", None)  # django-q2 sets it on workers only
    if timer is not None and timer.get_obj().value == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


class Sentinel(django_q_cluster.Sentinel):
    def __init__(self, stop_event: Any, start_event: Any, cluster_id: uuid.UUID, broker: Any = None,
                 timeout: int | None = None, start: bool = True) -> None:
        super().__init__(stop_event, start_event, cluster_id, broker, timeout, start=False)
        # django-q2 has just set SIGTERM back to its default action; the processes forked
        # from here on inherit this handler instead.
        signal.signal(signal.SIGTERM, _on_sigterm)
        if start:
            self.start()


class Cluster(django_q_cluster.Cluster):
    _stopping = False

    def __init__(self, broker: Any = None) -> None:
        super().__init__(broker)
        # Shared memory that the processes forked from here on inherit: one byte, no lock.
        self.stopping = RawValue(ctypes.c_bool, False)

    def start(self) -> int:
        """django-q2's Cluster.start, starting this module's Sentinel."""
        if setproctitle:
            setproctitle.setproctitle(f"qcluster {current_process().name} {self.name}")
        stopping = self.stopping
        drain.stop_when(lambda: stopping.value)
        self.stop_event = Event()
        self.start_event = Event()
        self.sentinel = django_q_cluster.get_mp_context().Process(
            target=Sentinel,
            name=f"Process-{uuid.uuid4().hex}",
            args=(self.stop_event, self.start_event, self.cluster_id, self.broker, self.timeout),
        )
        self.sentinel.start()
        logger.info("Q Cluster %s starting.", self.name)
        # Polled rather than waited on, as django-q2 does: a signal handled during a wait()
        # would deadlock on the event.
        while self.start_event and not self.start_event.is_set():
            if not self.sentinel.is_alive():
                if self.sentinel.exitcode == 0:
                    break  # stopped by a signal while starting
                raise RuntimeError(f"Q Cluster {self.name} failed to start: sentinel exited with code {self.sentinel.exitcode}")
            sleep(0.1)
        return self.pid

    def stop(self) -> bool:
        self.stopping.value = True
        return super().stop()

    def sig_handler(self, signum: int, frame: FrameType | None) -> None:
        # A second signal (SIGINT after SIGTERM, say) while stopping would set the stop
        # event from inside its own set(), on a lock that is not re-entrant.
        if self._stopping:
            return
        self._stopping = True
        super().sig_handler(signum, frame)
