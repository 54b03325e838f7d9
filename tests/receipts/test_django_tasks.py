"""@receipts.once on a django.tasks task (Django 6; on Django 5.2 the django-tasks backport),
proven with real `db_worker` processes of django-tasks-db, a database backend (Django ships
only the Immediate and Dummy backends), on the idemdash test database: a task enqueued again
and again for two keys makes one effect per key, and every enqueued task returns its key's
one result."""

from __future__ import annotations

import os
import sys
from collections import Counter
from importlib.util import find_spec

import django
import pytest
from django.db import connections

from receipts.models import Attempt, Receipt
from tests.qcluster import database_url, start_process, stop_process, subprocess_env
from tests.waits import until

pytestmark = pytest.mark.slow

WORKERS = 3


@pytest.fixture
def django_tasks_db() -> None:
    """django-tasks-db, and django.tasks (Django 6) or its backport (django-tasks, on 5.2)."""
    missing = []
    if not find_spec("django_tasks_db"):
        missing.append("django-tasks-db")
    if not find_spec("django.tasks") and not find_spec("django_tasks"):
        missing.append(f"django.tasks (Django 6; this is {django.get_version()}) or the django-tasks backport")
    if missing:
        if os.environ.get("IDEMDASH_REQUIRE_DJANGO_TASKS") == "1":
            pytest.fail(f"{' and '.join(missing)} missing, and IDEMDASH_REQUIRE_DJANGO_TASKS=1")
        pytest.skip(f"{' and '.join(missing)} missing (the dev extra installs them)")


@pytest.mark.django_db(transaction=True)
def test_a_task_enqueued_again_and_again_runs_once_per_key_in_real_db_workers(django_tasks_db, tmp_path):
    from tests.receipts.db_worker_tasks import TaskResultStatus, send_welcome

    providers = {user: tmp_path / f"provider-{user}" for user in (1, 2)}
    env = subprocess_env(DATABASE_URL=database_url(), PYTHONUNBUFFERED="1")
    argv = [sys.executable, "manage.py", "db_worker", "--interval=0.1", "--no-startup-delay", "--no-reload"]
    logs = [tmp_path / f"db_worker-{n}.log" for n in range(WORKERS)]
    results = [send_welcome.enqueue(user, str(providers[user])) for user in [1, 1, 2, 1, 1, 2, 1, 1]]
    # Three workers, each with its own connection, take the duplicates at once.
    workers = [start_process(argv, log, env) for log in logs]
    try:
        def finished(result) -> bool:
            dead = [w.pid for w in workers if w.poll() is not None]
            assert not dead, "\n".join(log.read_text()[-2000:] for log in logs)
            result.refresh()
            return result.is_finished

        for result in results:
            until(lambda: finished(result), "every duplicate finished", within=60, every=0.1)
    finally:
        for worker in workers:
            stop_process(worker)
        connections.close_all()

    assert [r.status for r in results] == [TaskResultStatus.SUCCESSFUL] * len(results), [r.errors for r in results]
    keys = {}
    for user, provider in providers.items():
        [(_, keys[user])] = [line.split() for line in provider.read_text().splitlines()]  # one effect per key
    assert Counter(str(r.return_value) for r in results) == {
        str({"sent": 1, "downstream_key": keys[1]}): 6,
        str({"sent": 2, "downstream_key": keys[2]}): 2,
    }
    # More than one worker ran them: the duplicates did meet in separate processes.
    assert len({r.worker_ids[-1] for r in results}) > 1
    assert Receipt.objects.filter(status="completed").count() == 2
    assert Attempt.objects.filter(outcome="claimed").count() == 2
