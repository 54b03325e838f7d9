"""REDIS_URL switches django-q2 from the database broker to Redis: proven with a real web
server and a real qcluster, both on the PostgreSQL test database, passing a webhook event's
task through Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis
import stripe
from django.db import connection
from django_q.models import OrmQ

from idemdash.devtools.models import Fulfilment
from tests.qcluster import database_url, free_port, start_qcluster, stop_process
from tests.waits import until
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
# Not 0, which a local `make demo` with REDIS_URL would use; the queue name is unique per run
# as well, so two test runs sharing this Redis never take each other's tasks.
REDIS_DB = 9
SECRET = "whsec_redis_broker_test_0000000"


def _redis_answers() -> bool:
    try:
        return bool(redis.Redis(host=REDIS_HOST, port=REDIS_PORT, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_with_redis_url_a_real_qcluster_processes_an_event_the_web_server_enqueued_in_redis():
    if not _redis_answers():
        if os.environ.get("IDEMDASH_REQUIRE_REDIS") == "1":
            pytest.fail(f"no Redis at {REDIS_HOST}:{REDIS_PORT}, and IDEMDASH_REQUIRE_REDIS=1")
        pytest.skip(f"no Redis at {REDIS_HOST}:{REDIS_PORT} (.ci/run starts one)")

    queue = f"idemdash-test-{uuid.uuid4().hex[:12]}"
    queued = redis.Redis(host=REDIS_HOST, port=REDIS_PORT, db=REDIS_DB)
    env = {
        k: v for k, v in os.environ.items()
        if not k.endswith("_WEBHOOK_SECRET") and k not in {"IDEMDASH_TEST_DB_SUFFIX", "Q_CLUSTER_NAME"}
    }
    env.update(
        DATABASE_URL=database_url(),
        REDIS_URL=f"redis://{REDIS_HOST}:{REDIS_PORT}/{REDIS_DB}",
        Q_CLUSTER_NAME=queue,
        STRIPE_WEBHOOK_SECRET=SECRET,
        Q_WORKERS="1",
        PYTHONUNBUFFERED="1",
    )
    port = free_port()
    log_dir = ROOT / "var"
    log_dir.mkdir(exist_ok=True)
    web_log, worker_log = log_dir / "test-redis-web.log", log_dir / "test-redis-qcluster.log"
    started: list[subprocess.Popen] = []
    try:
        with open(web_log, "wb") as out:
            started.append(subprocess.Popen(
                [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            ))
        intent = {"id": "pi_redis_1", "object": "payment_intent", "amount": 900, "currency": "eur"}
        event = {"id": "evt_redis_1", "object": "event", "type": "payment_intent.succeeded", "data": {"object": intent}}
        body = json.dumps(event)
        headers = {
            "Content-Type": "application/json",
            "Stripe-Signature": stripe.WebhookSignature.generate_signature_header(body, SECRET),
        }
        def delivered() -> httpx.Response | None:
            try:
                return httpx.post(f"http://127.0.0.1:{port}/webhooks/stripe/", content=body, headers=headers, timeout=10)
            except httpx.TransportError:
                return None  # the web server is not up yet

        reply = until(delivered, "the web server to take the delivery", within=60, every=0.2, log=web_log)
        assert reply.status_code == 200, reply.text
        event_id = reply.json()["event"]

        # The task is in Redis, under this run's queue, and not in the database broker's table.
        assert queued.llen(f"django_q:{queue}:q") == 1
        assert OrmQ.objects.count() == 0
        assert WebhookEvent.objects.get(pk=event_id).status == "received"

        started.append(start_qcluster(worker_log, **{k: env[k] for k in ("REDIS_URL", "Q_CLUSTER_NAME", "STRIPE_WEBHOOK_SECRET")}))
        def completed() -> bool:
            assert started[-1].poll() is None, worker_log.read_text()[-3000:]
            return WebhookEvent.objects.get(pk=event_id).status == "completed"

        until(completed, "the event completed through Redis", within=60, log=worker_log)
        assert Fulfilment.objects.get().payment_id == "pi_redis_1"
        assert queued.llen(f"django_q:{queue}:q") == 0
    finally:
        for process in reversed(started):
            stop_process(process)  # SIGTERM, then SIGKILL of the process group
        queued.delete(f"django_q:{queue}:q")
        connection.close()
