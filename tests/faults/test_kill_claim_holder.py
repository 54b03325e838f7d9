"""SIGKILL a worker that holds claims mid-operation, again and again.

The worker's side effect is a row written in the same transaction that completes the
receipt (as the @idempotent decorator does), so a kill either loses both or keeps both.
After the leases of killed workers expire, later workers take the keys over; in the end
every key is completed exactly once, with exactly one side effect, and nothing is left
processing. Real processes, real SIGKILL, a real database; bounded in rounds and time.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from receipts import store
from receipts.models import Attempt, Receipt

pytestmark = pytest.mark.slow

SCOPE = "client:kill"
KEYS = [f"charge-{i}" for i in range(12)]
LEASE = 1


def _worker(seed: int, holding) -> None:
    rng = random.Random(seed)
    keys = KEYS[:]
    rng.shuffle(keys)
    for _ in range(2):  # a second pass picks up the keys whose lease ran out while this one ran
        for key in keys:
            result = store.claim(SCOPE, key, "payment.capture", {"key": key}, lease_seconds=LEASE)
            if not result.owned:
                continue
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("INSERT INTO fault_effects (k, pid) VALUES (%s, %s)", [key, os.getpid()])
                holding.set()  # the parent may kill us now: mid-operation, claim held
                time.sleep(rng.uniform(0.06, 0.12))
                store.complete(store.Held(SCOPE, key, result.token), body=f"captured {key}")
    connections.close_all()


def _all_settled() -> bool:
    return Receipt.objects.filter(scope=SCOPE, status="completed").count() == len(KEYS)


@pytest.mark.django_db(transaction=True)
def test_killed_claim_holders_leave_every_key_completed_exactly_once():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE fault_effects (k varchar(64) NOT NULL, pid integer NOT NULL)")
    try:
        ctx = multiprocessing.get_context("fork")
        rng = random.Random(7)
        kills = 0
        deadline = time.monotonic() + 90
        for round_no in range(40):
            if _all_settled() or time.monotonic() > deadline:
                break
            connections.close_all()
            holding = ctx.Event()
            worker = ctx.Process(target=_worker, args=(round_no, holding))
            worker.start()
            # The first rounds' workers are killed while they hold a claim and have written
            # their side effect, but not yet committed it with the completion.
            if round_no < 6 and holding.wait(10):
                time.sleep(rng.uniform(0.0, 0.04))
                os.kill(worker.pid, signal.SIGKILL)
                kills += 1
                worker.join(30)
                # The killed holder's lease runs out: the test holds the clock rather than wait
                # for it, and the next worker takes the key over.
                Receipt.objects.filter(scope=SCOPE, status="processing").update(
                    lease_expires_at=timezone.now() - timedelta(seconds=1))
                connections.close_all()
            worker.join(30)
        assert kills >= 3
        # Every killed holder's claim was taken over once its lease ran out.
        assert Attempt.objects.filter(scope=SCOPE, outcome="lease_takeover").count() >= kills
        assert _all_settled(), list(Receipt.objects.filter(scope=SCOPE).values_list("key", "status"))
        with connection.cursor() as cursor:
            cursor.execute("SELECT k, COUNT(*) FROM fault_effects GROUP BY k")
            effects = dict(cursor.fetchall())
        assert effects == {key: 1 for key in KEYS}
        assert not Receipt.objects.filter(scope=SCOPE, status="processing").exists()
        completions = Attempt.objects.filter(scope=SCOPE, outcome="completed")
        assert sorted(completions.values_list("key", flat=True)) == sorted(KEYS)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE fault_effects")
