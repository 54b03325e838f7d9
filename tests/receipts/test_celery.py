"""@receipts.once in Celery, proven with real `celery worker` processes of a host project
written the way Celery's Django guide writes one (tests/receipts/celery_host: proj/celery.py,
shop/tasks.py with `@shared_task(acks_late=True, reject_on_worker_lost=True)`), on a local
Redis broker and the idemdash test database: a task enqueued again and again makes one effect
per key; a worker killed with SIGKILL after the effect and before the task settled has its
message delivered again by the broker to a new worker, and a pool process killed so has its
message given back by its worker: either re-run reaches the provider with the same
downstream key, and the receipt completes once. Under `after_crash: "hold"` (shop.tasks.
send_invoice) the redelivered message does not run: it fails with OutcomeUnknown, the provider
is called once, and once an operator marks the receipt completed the task replays that result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout
from django.db import connections

from receipts.models import Attempt, Receipt
from tests.qcluster import ROOT, database_url, kill_process, start_process, subprocess_env
from tests.waits import until

pytestmark = pytest.mark.slow

HOST = Path(__file__).resolve().parent / "celery_host"
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
# Not 0 (a developer's), nor 9 (tests/idemdash/test_redis_broker.py); every key a run makes
# carries its own prefix as well (kombu's and the result backend's global_keyprefix), so
# parallel runs sharing this Redis never take each other's tasks.
REDIS_DB = 10
TASK = "shop.tasks.send_welcome"
HELD_TASK = "shop.tasks.send_invoice"  # its operation, invoice.send, holds a key after a crash


def _wait_for(condition: Callable[[], bool], within: float, why: Callable[[], str]) -> None:
    """tests/waits.py:until, with the workers' logs (`why`) read only if it fails."""
    try:
        until(condition, "the condition", within=within, every=0.1)
    except AssertionError:
        raise AssertionError(why()) from None


class CeleryRun:
    """The host project's workers, started on this run's Redis keys, and a producer that
    enqueues by task name, as another service (or the web process) would."""

    def __init__(self, tmp_path: Path) -> None:
        self.prefix = f"idemdash-test-{uuid.uuid4().hex[:12]}:"
        url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}"
        self.logs = tmp_path
        self.env = subprocess_env(
            DATABASE_URL=database_url(),
            DJANGO_SETTINGS_MODULE="proj.settings",
            PYTHONPATH=os.pathsep.join([str(HOST), str(ROOT)]),
            PYTHONUNBUFFERED="1",
            CELERY_BROKER_URL=url,
            CELERY_RESULT_BACKEND=url,
            CELERY_KEY_PREFIX=self.prefix,
        )
        self.app = Celery("producer", broker=url, backend=url, set_as_current=False)
        self.app.conf.broker_transport_options = {"global_keyprefix": self.prefix}
        self.app.conf.result_backend_transport_options = {"global_keyprefix": self.prefix}
        self.redis = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
        self.workers: list[subprocess.Popen] = []
        self.killed: list[subprocess.Popen] = []

    def start_worker(self, name: str, concurrency: int, visibility_timeout: int = 3600) -> subprocess.Popen:
        argv = [sys.executable, "-m", "celery", "-A", "proj", "worker", "--loglevel=INFO", "--pool=prefork",
                f"--concurrency={concurrency}", f"--hostname={name}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat"]
        env = {**self.env, "CELERY_VISIBILITY_TIMEOUT": str(visibility_timeout)}
        worker = start_process(argv, self.log(name), env, cwd=HOST)
        self.workers.append(worker)
        return worker

    def log(self, name: str) -> Path:
        return self.logs / f"worker-{name}.log"

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-2500:]}" for p in sorted(self.logs.glob("worker-*.log")))

    def enqueue(self, *args: object, task: str = TASK):
        return self.app.send_task(task, args=args)

    def kill(self, worker: subprocess.Popen) -> None:
        """SIGKILL of its process group: the worker and its pool processes, at once."""
        self.workers.remove(worker)
        kill_process(worker)
        self.killed.append(worker)

    def get(self, result, within: float, propagate: bool = True) -> object:
        """The task's result (without `propagate`, the error it raised, as Celery rebuilds it);
        a failure (with the workers' logs) if a worker died meanwhile or none came within
        `within` seconds."""
        def ready() -> bool:
            dead = [w.pid for w in self.workers if w.poll() is not None]
            assert not dead, f"worker process(es) {dead} exited\n{self.tail()}"
            return result.ready()

        _wait_for(ready, within, lambda: f"task {result.id} had no result within {within} s\n{self.tail()}")
        try:
            return result.get(timeout=5, propagate=propagate)
        except CeleryTimeout:
            pytest.fail(f"task {result.id} is ready but its result did not come\n{self.tail()}")

    def close(self) -> None:
        for worker in self.workers:
            kill_process(worker)
        self.app.close()
        keys = list(self.redis.scan_iter(match=self.prefix + "*", count=1000))
        if keys:
            self.redis.delete(*keys)
        self.redis.close()


@pytest.fixture
def celery_run(tmp_path: Path) -> Iterator[CeleryRun]:
    try:
        redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=1).ping()
    except redis.RedisError:
        if os.environ.get("IDEMDASH_REQUIRE_REDIS") == "1":
            pytest.fail(f"no Redis at {REDIS_HOST}:{REDIS_PORT}, and IDEMDASH_REQUIRE_REDIS=1")
        pytest.skip(f"no Redis at {REDIS_HOST}:{REDIS_PORT} (.ci/run starts one)")
    run = CeleryRun(tmp_path)
    try:
        yield run
    finally:
        run.close()  # SIGKILL of every worker's process group, and this run's Redis keys
        connections.close_all()


def _received(provider: Path) -> list[tuple[str, str]]:
    """(pid, downstream key) of every call the provider received."""
    return [tuple(line.split()) for line in provider.read_text().splitlines()]


@pytest.mark.django_db(transaction=True)
def test_a_task_enqueued_again_and_again_makes_one_effect_per_key_in_a_real_celery_worker(celery_run, tmp_path):
    providers = {user: tmp_path / f"provider-{user}" for user in (1, 2)}
    celery_run.start_worker("pool", concurrency=3)  # three processes take the duplicates at once
    results = [celery_run.enqueue(user, str(providers[user])) for user in [1, 1, 2, 1, 1, 2, 1, 1]]
    answers = [celery_run.get(result, within=60) for result in results]

    keys = {}
    for user, provider in providers.items():
        [(_, keys[user])] = _received(provider)  # one call each: one effect per key
    # Every task returned its key's one result: the first run's, or the replay of it.
    assert Counter(str(a) for a in answers) == {
        str({"sent": 1, "downstream_key": keys[1]}): 6,
        str({"sent": 2, "downstream_key": keys[2]}): 2,
    }
    assert keys[1] != keys[2]
    assert Receipt.objects.filter(status="completed").count() == 2
    assert Attempt.objects.filter(outcome="claimed").count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_after_the_effect_has_its_task_redelivered_and_the_provider_sees_one_key(celery_run, tmp_path):
    provider = tmp_path / "provider"
    Path(f"{provider}.stall").touch()  # the first run hangs after its effect
    # The broker gives an unacknowledged message to another worker after 5 s: longer than
    # the kill takes to come, shorter than the test may wait.
    first = celery_run.start_worker("first", concurrency=1, visibility_timeout=5)
    result = celery_run.enqueue(9, str(provider))
    sent = Path(f"{provider}.sent")
    _wait_for(sent.exists, 30, lambda: f"the first worker never made the effect\n{celery_run.tail()}")
    celery_run.kill(first)
    assert first.returncode == -9
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("processing", 1)  # never settled
    unacked = celery_run.redis.hlen(celery_run.prefix + "unacked")
    assert unacked == 1, "the message of the killed task is not held by the broker as unacknowledged"

    celery_run.start_worker("second", concurrency=1, visibility_timeout=5)
    answer = celery_run.get(result, within=45)  # the redelivered message, run by the second worker

    (first_pid, first_key), (second_pid, second_key) = _received(provider)
    assert first_pid != second_pid  # two runs, in two workers
    assert first_key == second_key  # one downstream key: the provider makes one effect
    assert answer == {"sent": 9, "downstream_key": first_key}
    receipt.refresh_from_db()
    assert (receipt.status, receipt.attempts) == ("completed", 2)
    assert Attempt.objects.filter(outcome="lease_takeover").count() == 1
    # The second worker acknowledged the message once the task settled: nothing to redeliver.
    _wait_for(lambda: celery_run.redis.hlen(celery_run.prefix + "unacked") == 0, 30, celery_run.tail)


@pytest.mark.django_db(transaction=True)
def test_a_pool_process_killed_after_the_effect_has_its_task_requeued_and_the_provider_sees_one_key(celery_run, tmp_path):
    """reject_on_worker_lost: the worker itself lives and gives the message back at once;
    no visibility timeout is involved (an hour here)."""
    provider = tmp_path / "provider"
    Path(f"{provider}.stall").touch()
    worker = celery_run.start_worker("lives", concurrency=1)
    result = celery_run.enqueue(5, str(provider))
    _wait_for(Path(f"{provider}.sent").exists, 30, lambda: f"the task never made the effect\n{celery_run.tail()}")
    [(pool_pid, _)] = _received(provider)
    os.kill(int(pool_pid), signal.SIGKILL)  # the pool process running the task, not the worker

    answer = celery_run.get(result, within=30)
    (first_pid, first_key), (second_pid, second_key) = _received(provider)
    assert first_pid != second_pid and worker.poll() is None  # a new pool process of the same worker
    assert first_key == second_key
    assert answer == {"sent": 5, "downstream_key": first_key}
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("completed", 2)
    # Celery requeues the message (celery.worker.request.Request.on_failure) before it logs the lost pool
    # process, so the retry's answer can come first: read until the line is there.
    _wait_for(lambda: "WorkerLostError" in celery_run.log("lives").read_text(), 30, celery_run.tail)


def _held_by_the_worker(celery_run: CeleryRun, result) -> None:
    """The task raised OutcomeUnknown in the worker: it did not run, and its message is done."""
    error = celery_run.get(result, within=45, propagate=False)
    assert result.state == "FAILURE", f"{result.state}: {error!r}\n{celery_run.tail()}"
    # Celery's traceback of the exception as the worker raised it (the result backend names
    # it by its base class when rebuilding it, so the raise itself is what is asserted).
    assert "raise OutcomeUnknown(" in result.traceback and "409 The outcome of the last attempt" in result.traceback, (
        result.traceback)


@pytest.mark.django_db(transaction=True)
def test_under_hold_a_task_redelivered_after_its_worker_was_killed_is_outcome_unknown_until_an_operator_resolves_it(
    celery_run, tmp_path, settings
):
    from receipts.operator_actions import MARK_COMPLETED

    settings.RECEIPTS_OPERATIONS = {"invoice.send": {"after_crash": "hold", "lease_seconds": 2}}  # as the host's
    provider = tmp_path / "provider"
    Path(f"{provider}.stall").touch()  # the first run hangs after its effect
    first = celery_run.start_worker("first", concurrency=1, visibility_timeout=5)
    result = celery_run.enqueue(7, str(provider), task=HELD_TASK)
    _wait_for(Path(f"{provider}.sent").exists, 30, lambda: f"the first worker never made the effect\n{celery_run.tail()}")
    celery_run.kill(first)
    assert first.returncode == -9
    assert Receipt.objects.get().status == "processing"  # never settled

    # The broker delivers the message again to a new worker: by then the lease (2 s) has run
    # out, and the task is answered outcome-unknown instead of calling the provider again.
    celery_run.start_worker("second", concurrency=1, visibility_timeout=5)
    _held_by_the_worker(celery_run, result)
    _wait_for(lambda: celery_run.redis.hlen(celery_run.prefix + "unacked") == 0, 30, celery_run.tail)
    # A retry sent meanwhile (a new message, the same key) is held too.
    _held_by_the_worker(celery_run, celery_run.enqueue(7, str(provider), task=HELD_TASK))
    [(_, sent_as)] = _received(provider)  # the provider was called once
    receipt = Receipt.objects.get()
    assert receipt.outcome_unknown and receipt.attempts == 1
    assert list(Attempt.objects.order_by("pk").values_list("outcome", flat=True)) == [
        "claimed", "outcome_unknown", "outcome_unknown",
    ]

    # The operator finds the invoice at the provider (by sent_as) and marks it completed.
    MARK_COMPLETED.run(receipt, actor="otto", user=None, reason=f"the provider has {sent_as}",
                       result='{"sent": 7, "found_by": "otto"}')
    answer = celery_run.get(celery_run.enqueue(7, str(provider), task=HELD_TASK), within=30)
    assert answer == {"sent": 7, "found_by": "otto"}
    assert len(_received(provider)) == 1
    assert Attempt.objects.order_by("pk").last().outcome == "replayed"
