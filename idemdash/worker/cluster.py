"""A django-q2 cluster that stops cleanly on SIGTERM, and that a process killed at any
point cannot wedge (docs/operations.md, "Liveness").

Only the main process acts on SIGTERM (`_on_sigterm`, `Cluster.stop`). A process of the
cluster that dies unasked ends the sentinel and all its processes, and the main process
starts them afresh on new queues (`Sentinel._lost`, `Cluster.run`).

This relies on django-q2 internals (Sentinel's `start` argument, what its guard loop calls,
the `timer` on each worker process, Cluster's start(), which names its Sentinel class):
tests/idemdash/test_worker_cluster.py checks them and names the django-q2 version when they change."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import time
import uuid
from collections import deque
from multiprocessing import Event, RawValue, current_process
from time import sleep
from types import FrameType, ModuleType
from typing import Any

from django.apps import apps
from django_q import cluster as django_q_cluster
from django_q.conf import Conf, logger, setproctitle
from django_q.humanhash import humanize

from idemdash.worker import liveness
from idemdash.worker.conf import setting

# The sentinel's exit code when one of its processes died unasked.
LOST_A_PROCESS = 3
RESTART_LIMIT = 5
RESTART_WINDOW = 60
_PR_SET_PDEATHSIG = 1


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM outside the main process: ignored, but by a worker whose task overran
    django-q2's timeout (its timer reads 0), which still dies, so the timeout keeps working.

    django-q2's sentinel resets SIGTERM to the default action, and the worker, pusher and
    monitor it forks inherit that. A SIGTERM to the whole group (KillMode=control-group,
    `kill -- -PGID`) then kills them all on the spot, the task in flight included, while the
    main process sets the stop event that the dead sentinel was waiting on. A multiprocessing
    Event.set waits for each waiter to acknowledge the wake-up, and a dead waiter never does:
    django-q2's main process waits forever."""
    # In the sentinel and in every process it forks. No logging and no locks: the signal
    # may land while this process holds the lock that they would take.
    timer = getattr(current_process(), "timer", None)  # django-q2 sets it on workers only
    if timer is not None and timer.get_obj().value == 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux), so that no process
    of a dead sentinel (or of a dead main process) keeps running unsupervised."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    with contextlib.suppress(AttributeError, OSError):
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)


def _outbox_drain() -> ModuleType | None:
    """receipts/outbox/drain.py, which the cluster tells when to stop and when to yield; None
    where the outbox is not installed (a host may receive webhooks without it)."""
    if not apps.is_installed("receipts.outbox"):
        return None
    from receipts.outbox import drain

    return drain


def _role(sentinel: django_q_cluster.Sentinel, process: Any) -> str:
    if process is sentinel.monitor:
        return "monitor"
    if process is sentinel.pusher:
        return "pusher"
    return "worker"


class _GuardedTimer:
    """A worker's timer as the guard sees it (`Sentinel.spawn_process`): django-q2's guard
    takes its lock with no timeout, and a worker killed inside it holds it for good. Taken
    here a cycle at a time; a worker found dead meanwhile is lost (`Sentinel._lost`)."""

    def __init__(self, timer: Any, process: Any, sentinel: Sentinel) -> None:
        self.timer, self.process, self.sentinel = timer, process, sentinel

    @property
    def value(self) -> float:
        return self.timer.value

    @value.setter
    def value(self, value: float) -> None:
        self.timer.value = value

    def get_lock(self) -> _GuardedTimer:
        return self

    def __enter__(self) -> None:
        while not self.timer.get_lock().acquire(timeout=Conf.GUARD_CYCLE):
            if not self.process.is_alive():
                self.sentinel._lost(self.process)

    def __exit__(self, *exc: object) -> None:
        self.timer.get_lock().release()


class _EachCycle:
    """The stop event, which django-q2's guard waits on once a cycle: `each` (the tick) runs
    before every wait."""

    def __init__(self, event: Any, each: Any) -> None:
        self.event, self.each = event, each

    def wait(self, timeout: float | None = None) -> bool:
        self.each()
        return self.event.wait(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.event, name)


class Sentinel(django_q_cluster.Sentinel):
    """django-q2's sentinel and its guard loop, with four hooks: SIGTERM handled and every
    process dying with its parent (`__init__`), a process that died unasked ending the
    sentinel (`reincarnate`, `_lost`), a worker's timer lock never waited on for good
    (`spawn_process`), and the liveness tick and records (`_EachCycle`, `spawn_cluster`, `stop`)."""

    def __init__(self, stop_event: Any, start_event: Any, cluster_id: uuid.UUID, broker: Any = None,
                 timeout: int | None = None, start: bool = True) -> None:
        _die_with_parent(os.getppid())
        super().__init__(_EachCycle(stop_event, self._tick), start_event, cluster_id, broker, timeout, start=False)
        # django-q2 has just set SIGTERM back to its default action; the processes forked
        # from here on inherit this handler instead.
        signal.signal(signal.SIGTERM, _on_sigterm)
        me = os.getpid()
        os.register_at_fork(after_in_child=lambda: _die_with_parent(me))
        liveness.CLUSTER_ID = cluster_id  # for the workers forked from here on
        if (drain := _outbox_drain()) is not None:
            drain.yield_when(lambda: self.task_queue.qsize() > 0)  # a drain ends after a send when tasks wait
        self.next_tick = 0.0
        if start:
            self.start()

    def spawn_process(self, target: Any, *args: Any) -> Any:
        process = super().spawn_process(target, *args)
        if process in self.pool:  # a worker: started with the timer itself, guarded with this
            process.timer = _GuardedTimer(process.timer, process, self)
        return process

    def spawn_cluster(self) -> None:
        super().spawn_cluster()
        liveness.started(self.cluster_id, humanize(self.cluster_id.hex), self.parent_pid, self.queue_name())

    def reincarnate(self, process: Any) -> None:
        """What django-q2 replaces on purpose is still replaced in place (a worker that exited
        by itself after its recycle count, one past its timeout, the pusher that left when
        the broker failed); a process that died unasked ends the sentinel instead."""
        if not process.is_alive() and process.exitcode != 0:
            self._lost(process)
        super().reincarnate(process)

    def stop(self) -> None:
        super().stop()
        liveness.stopped(self.cluster_id)

    def _tick(self) -> None:
        """Hand the workers the tick task (idemdash/worker/liveness.py), unless as many
        tasks as there are workers are waiting already."""
        every = setting("WORKER_TICK_SECONDS")
        if not every or time.monotonic() < self.next_tick or self.task_queue.qsize() >= len(self.pool):
            return
        self.next_tick = time.monotonic() + every
        self.task_queue.put(liveness.tick_package(humanize(self.cluster_id.hex)))

    def _lost(self, process: Any) -> None:
        """End every process this sentinel started and exit with `LOST_A_PROCESS`, so that
        the main process starts a new sentinel with new queues (`Cluster.run`).

        The processes share two queues (tasks from the pusher to the workers, results from
        the workers to the monitor) and a lock per worker (its timer). A process killed while
        it holds one of their locks (an idle worker waits inside the task queue's get(),
        holding its read lock), or while it writes into one of their pipes, leaves the lock
        held or the pipe half-written for good. django-q2's answer, a new process on the same
        queues, then waits forever: nothing is processed, SIGTERM never finishes, and the
        scheduler, which runs in the sentinel, keeps firing, so the cluster looks alive.
        Tasks the killed processes held but had not started are taken again by the ORM
        broker after its `retry`, and swept (events) or drained (messages) before that; work
        they had started is taken over by its lease (docs/architecture.md, section 2)."""
        logger.critical(
            "Q Cluster %s: its %s %s died (exit code %s) and may have left the queues it shares locked; "
            "starting all of its processes afresh",
            humanize(self.cluster_id.hex), _role(self, process), process.pid, process.exitcode,
        )
        for other in [*self.pool, self.monitor, self.pusher]:
            if other is not None and other.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(other.pid, signal.SIGKILL)
        for other in [*self.pool, self.monitor, self.pusher]:
            if other is not None:
                other.join(5)
        os._exit(LOST_A_PROCESS)  # no finalizers: they would flush into the broken queues


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
        if (drain := _outbox_drain()) is not None:
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
                if self.sentinel.exitcode == 0 or self._stopping:
                    break  # stopped by a signal while starting
                raise RuntimeError(f"Q Cluster {self.name} failed to start: sentinel exited with code {self.sentinel.exitcode}")
            sleep(0.1)
        return self.pid

    def run(self) -> int:
        """Start the cluster and keep a sentinel running until a signal stops it: a sentinel
        that dies (or ends itself after losing a process) is replaced by a new one, with new
        processes and queues. Returns the exit code for the command: 0 once stopped, 1 when
        the sentinel kept dying (`RESTART_LIMIT` times in `RESTART_WINDOW` seconds)."""
        deaths: deque[float] = deque(maxlen=RESTART_LIMIT)
        while not self._stopping:
            try:
                self.start()
            except RuntimeError as exc:
                logger.error("%s", exc)
            while not self._stopping and self.sentinel.is_alive():
                sleep(0.2)
            if self._stopping:
                break
            deaths.append(time.monotonic())
            if len(deaths) == RESTART_LIMIT and deaths[-1] - deaths[0] < RESTART_WINDOW:
                logger.critical("Q Cluster %s: its sentinel died %s times within %s s; exiting",
                                self.name, RESTART_LIMIT, RESTART_WINDOW)
                return 1
            logger.error("Q Cluster %s: its sentinel exited with code %s; starting a new one",
                         self.name, self.sentinel.exitcode)
            sleep(min(8.0, 2.0 ** (len(deaths) - 1)))
        return 0

    def stop(self) -> bool:
        # The main process, on SIGTERM. The sentinel then stops the cluster as django-q2 does
        # on Ctrl-C (the pusher first, then a STOP queued behind the tasks already handed
        # over, then the monitor, which acknowledges what the workers finished). The flag
        # makes a long task (the outbox drain) end at its next unit of work rather than run
        # out its time.
        self.stopping.value = True
        return super().stop()

    def sig_handler(self, signum: int, frame: FrameType | None) -> None:
        # A second signal (SIGINT after SIGTERM, say) while stopping would set the stop
        # event from inside its own set(), on a lock that is not re-entrant.
        if self._stopping:
            return
        self._stopping = True
        super().sig_handler(signum, frame)
