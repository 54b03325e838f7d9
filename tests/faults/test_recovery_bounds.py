"""Recovery in seconds, with real processes and the default settings: work in flight when
PostgreSQL drops every connection is taken over within RECOVERY_BOUND, and events whose
enqueue failed while Redis was down are processed within REDIS_BOUND of Redis coming back,
each failed enqueue logged in one line.

The figures measured are printed (`-s`) and kept in var/recovery-times.txt (the cluster
kill's are in test_kill_qcluster.py). PostgreSQL only; the Redis test starts a Redis server
of its own on a free port (it stops it, so it cannot be the shared one) and needs
`redis-server` (.ci/run installs it; IDEMDASH_REQUIRE_REDIS=1 makes its absence a failure).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid

import httpx
import pytest
import stripe
from django.db import connection

from idemdash.core.models import AuditEntry
from tests.faults.test_kill_qcluster import RECOVERY_BOUND, record_recovery, run_counts
from tests.qcluster import CHILD_APPLICATION_NAME, free_port, kill_process, signal_group, start_process, start_qcluster, stop_process, subprocess_env, database_url, ROOT
from tests.webhooks.conftest import deliver_stripe, make_endpoint, stripe_event
from tests.waits import until
from webhooks.models import WebhookEvent

# `alone`: the bounds are documented promises, times measured beside the other recovery bounds only
# (.ci/run runs them side by side, each mostly waiting out a lease, after the other tiers).
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.alone, pytest.mark.django_db(transaction=True),
              pytest.mark.timeout(150)]

SECRET = "whsec_fault_recovery_bounds_00"
# docs/architecture.md, section 2: the sweep's tick (5 s), the pusher's look at the broker,
# and the run.
REDIS_BOUND = 20


def test_events_in_flight_when_postgresql_drops_every_connection_complete_within_the_bound(client, settings, tmp_path):
    settings.STRIPE_WEBHOOK_SECRET = ""
    make_endpoint("faults", "stripe", SECRET)
    run_log = tmp_path / "runs.log"
    run_log.touch()
    qlog = tmp_path / "qcluster.log"
    env = {"DJANGO_SETTINGS_MODULE": "tests.faults.qcluster_settings", "FAULT_RUN_LOG": str(run_log),
           "FAULT_HANDLER_SECONDS": "2", "Q_WORKERS": "2"}
    event_ids = []
    for i in range(4):
        response = deliver_stripe(client, "faults", stripe_event({"id": f"pg_{i}"}, "fault.slow"), secret=SECRET)
        event_ids.append(response.json()["event"])
    events = WebhookEvent.objects.filter(pk__in=event_ids)

    cluster = start_qcluster(qlog, **env)
    try:
        until(lambda: events.filter(status="processing", pk__in=list(run_counts(run_log))).exists(), "a running handler", within=60, log=qlog)
        with connection.cursor() as cursor:  # as a failover or a restart would, to the cluster's connections
            cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND application_name = %s", [CHILD_APPLICATION_NAME])
            (terminated,) = cursor.fetchone()
        dropped_at = time.monotonic()
        assert terminated >= 2  # the handler's and at least the pusher's or the monitor's
        until(lambda: events.filter(status="completed").count() == len(event_ids), "every event completed", within=RECOVERY_BOUND + 5, log=qlog)
        took = time.monotonic() - dropped_at
        record_recovery("PostgreSQL dropped every connection mid-webhook: every event completed after", took)
        assert took <= RECOVERY_BOUND
        assert cluster.poll() is None
    finally:
        kill_process(cluster)
        connection.close()
    effects = AuditEntry.objects.filter(action="faults.webhook_effect")
    assert sorted(effects.values_list("object_id", flat=True)) == sorted(str(pk) for pk in event_ids)


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found is None:
        if os.environ.get("IDEMDASH_REQUIRE_REDIS") == "1":
            pytest.fail("no redis-server on PATH, and IDEMDASH_REQUIRE_REDIS=1")
        pytest.skip("no redis-server on PATH (.ci/run installs it)")
    return found


def _deliver(port: int, n: int) -> int:
    intent = {"id": f"pi_down_{n}", "object": "payment_intent", "amount": 900, "currency": "eur"}
    body = json.dumps({"id": f"evt_down_{n}", "object": "event", "type": "payment_intent.succeeded",
                       "data": {"object": intent}})
    headers = {"Content-Type": "application/json",
               "Stripe-Signature": stripe.WebhookSignature.generate_signature_header(body, SECRET)}
    reply = httpx.post(f"http://127.0.0.1:{port}/webhooks/stripe/", content=body, headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()["event"]


def test_events_whose_enqueue_failed_while_redis_was_down_are_processed_soon_after_it_returns(tmp_path):
    server = _redis_server()
    redis_port, web_port = free_port(), free_port()
    redis_argv = [server, "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "", "--appendonly", "no"]
    env = subprocess_env(DATABASE_URL=database_url(), REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",
                         Q_CLUSTER_NAME=f"idemdash-test-{uuid.uuid4().hex[:12]}", STRIPE_WEBHOOK_SECRET=SECRET,
                         Q_WORKERS="2", PYTHONUNBUFFERED="1")
    web_log, qlog, redis_log = tmp_path / "web.log", tmp_path / "qcluster.log", tmp_path / "redis.log"
    started: list[subprocess.Popen] = []
    try:
        redis = start_process(redis_argv, redis_log, env)
        started.append(start_process([os.sys.executable, "manage.py", "runserver", f"127.0.0.1:{web_port}", "--noreload"],
                                     web_log, env))
        started.append(start_qcluster(qlog, **{k: env[k] for k in ("REDIS_URL", "Q_CLUSTER_NAME", "STRIPE_WEBHOOK_SECRET")}))

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{web_port}/login/", timeout=2).status_code < 500
            except httpx.TransportError:
                return False

        until(answers, "the web server", within=30, log=web_log)
        first = _deliver(web_port, 0)
        until(lambda: WebhookEvent.objects.get(pk=first).status == "completed", "an event through Redis", within=30, log=qlog)

        signal_group(redis, signal.SIGKILL)
        redis.wait(10)
        down_at = time.monotonic()
        waiting = [_deliver(web_port, n) for n in range(1, 4)]  # stored, answered 200, not enqueued
        # Down until the cluster's own sweep (its tick) has tried to enqueue one of them and failed.
        until(lambda: any(f"could not enqueue webhook event {pk} " in qlog.read_text() for pk in waiting),
              "the sweep's failed enqueue while Redis is down", within=60, log=qlog)
        down_for = time.monotonic() - down_at
        assert set(WebhookEvent.objects.filter(pk__in=waiting).values_list("status", flat=True)) == {"received"}
        redis = start_process(redis_argv, redis_log, env)
        back_at = time.monotonic()

        events = WebhookEvent.objects.filter(pk__in=waiting)
        until(lambda: events.filter(status="completed").count() == len(waiting), "the events delivered while Redis was down", within=REDIS_BOUND + 10, log=qlog)
        took = time.monotonic() - back_at
        record_recovery(f"Redis down {down_for:.0f} s: the events delivered meanwhile completed after its return, in", took)
        assert took <= REDIS_BOUND

        failed = [line for line in web_log.read_text().splitlines() if "could not enqueue webhook event" in line]
        assert len(failed) == len(waiting)  # one line for each failed enqueue ...
        assert "Traceback" not in web_log.read_text()  # ... and no traceback
    finally:
        for process in reversed(started):
            stop_process(process)
        kill_process(redis)
        connection.close()
