"""`make soak`: exactly once under faults, for as long as you let it run (bounded, loopback only).

Two web instances and two worker clusters serve the soak's protected views
(idemdash/devtools/soak/views.py) on PostgreSQL, while client threads (`Driver`) claim,
replay and deliver webhooks, each retried until answered, and a fault thread (`faults`)
SIGKILLs web workers and cluster processes and terminates database backends. Then it waits
for everything to settle and counts the effects per key, event and outbox message
(`findings`): it exits 1 on a double or a loss (docs/benchmarks.md, "The soak")."""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone as dt_timezone
from pathlib import Path
from typing import Any

import httpx

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/idemdash_soak"
SETTINGS = "idemdash.devtools.soak.settings"
ENDPOINT = "soak-stripe"
CLIENT_THREADS = 6
GIVE_UP_SECONDS = 120  # a client retrying one key longer than this records it as not answered
SETTLE_SECONDS = 300


@dataclass
class Tally:
    """What the clients and the fault thread did, counted as they did it."""

    requests: Counter = field(default_factory=Counter)  # by kind and answer
    kills: Counter = field(default_factory=Counter)  # by what was killed
    answered: dict[str, str] = field(default_factory=dict)  # key -> path, once the client got its 201
    unanswered: set[str] = field(default_factory=set)
    replays_that_ran: list[str] = field(default_factory=list)  # a replay answered without Idempotent-Replayed
    delivered: set[str] = field(default_factory=set)  # event ids answered 2xx
    undelivered: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, what: str) -> None:
        with self.lock:
            self.requests[what] += 1


class Driver:
    """The clients' traffic, each request retried until answered as a real caller retries:
    claims of fresh keys, half of them enqueueing an outbox message to the receiver; replays
    of keys already answered (which must never run the view again); Stripe-signed webhook
    deliveries, new events and redeliveries."""

    def __init__(self, bases: list[str], secret: str, run_id: str, deadline: float, tally: Tally, seed: int) -> None:
        self.bases, self.secret, self.run_id, self.deadline, self.tally = bases, secret, run_id, deadline, tally
        self.rng = random.Random(seed)
        self.n = 0

    def _retrying(self, what: str, call, done) -> Any:
        """Call until `done(response)`; connection errors, 5xx and 409 are retried, as a client does."""
        give_up = time.monotonic() + GIVE_UP_SECONDS
        pause = 0.05
        while time.monotonic() < give_up:
            try:
                response = call(self.rng.choice(self.bases))
            except httpx.HTTPError:
                self.tally.count(f"{what}: connection error")
            else:
                self.tally.count(f"{what}: {response.status_code}")
                if done(response):
                    return response
            time.sleep(pause)
            pause = min(pause * 2, 2.0)
        return None

    def _post_key(self, what: str, url: str, key: str) -> httpx.Response | None:
        return self._retrying(what, lambda base: httpx.post(
            base + url, json={"key": key}, headers={"Idempotency-Key": key}, timeout=30,
        ), lambda r: r.status_code == 201)

    def claim(self) -> None:
        self.n += 1
        key = f"{self.run_id}-{threading.get_ident() % 10000}-{self.n}"
        url = "/soak/effect/" + ("?outbox=1" if self.rng.random() < 0.5 else "")
        response = self._post_key("claim", url, key)
        with self.tally.lock:
            if response is None:
                self.tally.unanswered.add(key)
            else:
                self.tally.answered[key] = url

    def replay(self) -> None:
        with self.tally.lock:
            if not self.tally.answered:
                return
            key, url = self.rng.choice(list(self.tally.answered.items()))
        response = self._post_key("replay", url, key)
        if response is not None and response.headers.get("Idempotent-Replayed") != "true":
            with self.tally.lock:
                self.tally.replays_that_ran.append(key)

    def deliver(self) -> None:
        from idemdash.devtools.bench.runner import stripe_delivery

        with self.tally.lock:
            repeat = self.tally.delivered and self.rng.random() < 0.4
            event_id = self.rng.choice(list(self.tally.delivered)) if repeat else None
        self.n += 1
        event_id = event_id or f"evt_{self.run_id}_{threading.get_ident() % 10000}_{self.n}"
        body, headers = stripe_delivery(self.secret, event_id, "soak.effect")
        response = self._retrying("delivery", lambda base: httpx.post(
            f"{base}/webhooks/{ENDPOINT}/", content=body, headers=headers, timeout=30,
        ), lambda r: r.status_code == 200)
        with self.tally.lock:
            (self.tally.delivered if response is not None else self.tally.undelivered).add(event_id)

    def run(self) -> None:
        actions = [self.claim] * 5 + [self.replay] * 2 + [self.deliver] * 3
        while time.monotonic() < self.deadline:
            self.rng.choice(actions)()


def faults(processes: dict[str, Any], deadline: float, tally: Tally, seed: int) -> None:
    """Every 1 to 3 s one fault, in turn: a web worker or a cluster process SIGKILLed, a database
    backend terminated. Those inside a transaction (pg_stat_activity, named by the soak app)
    are chosen before idle ones, so that faults land mid-view, mid-task and mid-commit."""
    from django.db import connection

    rng = random.Random(seed)
    kinds = ["web worker", "cluster process", "database backend"]
    i = 0
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(1.0, 3.0))
        kind = kinds[i % len(kinds)]
        i += 1
        backends = _backends()
        if kind == "database backend":
            busy = [pid for pid, _, in_transaction in backends if in_transaction]
            pick = busy or [pid for pid, _, _ in backends]
            if pick:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_terminate_backend(%s)", [rng.choice(pick)])
                tally.kills[f"{kind}, {'in a transaction' if busy else 'idle'}"] += 1
            continue
        names = [n for n in processes if n.startswith("web" if kind == "web worker" else "cluster")]
        children = {pid for name in names for pid in processes[name].children()}
        busy = [process for _, process, in_transaction in backends if in_transaction and process in children]
        pick = busy or sorted(children)
        if pick:
            try:
                os.kill(rng.choice(pick), signal.SIGKILL)
                tally.kills[f"{kind}, {'in a transaction' if busy else 'idle'}"] += 1
            except ProcessLookupError:
                pass


def supervise(processes: dict[str, Any], out: Path, tally: Tally) -> None:
    """Start again a worker cluster that exited, as a supervisor would: one whose sentinel died 5
    times within a minute exits on purpose (idemdash/worker/cluster.py), and here it does."""
    from idemdash.devtools.bench import servers

    for name in [n for n in processes if n.startswith("cluster")]:
        if not processes[name].alive():
            processes[name].stop()
            processes[name] = servers.start_qcluster(out, name=name, settings_module=SETTINGS)
            tally.kills["cluster exited, restarted by the supervisor"] += 1


def _backends() -> list[tuple[int, int, bool]]:
    """The soak database's client backends but this process's own: (backend pid, the pid of
    the process it serves, whether it is inside a transaction)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name, state IN ('active', 'idle in transaction') FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )
        rows = cursor.fetchall()
    return [(pid, int(name[5:]) if name.startswith("soak:") else 0, bool(busy)) for pid, name, busy in rows]


def _effect_counts(label: Callable[[str], str], start: str) -> Counter:
    """Effects per key: the bench rows labelled `label(key)` whose key starts with `start`."""
    from idemdash.devtools.bench.models import BenchRow

    rows = BenchRow.objects.filter(label__startswith=label(start)).values_list("label", flat=True).iterator()
    return Counter(row[len(label("")):] for row in rows)


def _settled(run_id: str) -> bool:
    from receipts.models import Receipt
    from receipts.outbox.models import OutboxMessage
    from webhooks.models import WebhookEvent

    from idemdash.devtools.soak.views import SCOPE

    if Receipt.objects.filter(scope=SCOPE, key__startswith=run_id, status=Receipt.Status.PROCESSING).exists():
        return False
    if WebhookEvent.objects.filter(provider_event_id__startswith=f"evt_{run_id}").exclude(
        status__in=[WebhookEvent.Status.COMPLETED, WebhookEvent.Status.DEAD, WebhookEvent.Status.IGNORED]
    ).exists():
        return False
    pending = OutboxMessage.objects.filter(key__startswith=f"out:{run_id}").exclude(
        status__in=[OutboxMessage.Status.SENT, OutboxMessage.Status.DEAD]
    )
    return not pending.exists()


def summarize(run_id: str, receiver, tally: Tally, seconds: float, recovered: float | None, out: Path) -> dict:
    """Count the run's effects from the database and the receiver, and write the raw per-key
    counts (effects.csv) and a summary (summary.json, summary.md) into `out`."""
    from receipts.outbox.models import OutboxMessage

    from idemdash.devtools.soak.views import event_label, outbox_key, view_label

    views, events = _effect_counts(view_label, run_id), _effect_counts(event_label, f"evt_{run_id}")
    messages = set(OutboxMessage.objects.filter(key__startswith=f"out:{run_id}").values_list("key", flat=True))
    accepted = Counter(receiver.accepted_per_key)
    rows = []
    for key in sorted(set(tally.answered) | tally.unanswered | set(views)):
        message = outbox_key(key)
        rows.append({
            "kind": "claim", "key": key, "client": "answered" if key in tally.answered else "not answered",
            "effects": views[key], "outbox_message": message in messages,
            "receiver_accepts": accepted[message] if message in messages else "",
        })
    for event_id in sorted(tally.delivered | tally.undelivered | set(events)):
        rows.append({"kind": "event", "key": event_id,
                     "client": "delivered" if event_id in tally.delivered else "not delivered",
                     "effects": events[event_id], "outbox_message": "", "receiver_accepts": ""})
    with open(out / "effects.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["kind", "key"])
        writer.writeheader()
        writer.writerows(rows)
    doubles, lost = findings(tally, views, events, messages, accepted)
    broken = failures(tally)
    effects_per_key = Counter(views[k] for k in tally.answered)
    summary = {
        "run_id": run_id, "seconds": round(seconds, 1), "requests": dict(sorted(tally.requests.items())),
        "requests_total": sum(tally.requests.values()), "faults": dict(tally.kills),
        "keys_answered": len(tally.answered), "keys_not_answered": len(tally.unanswered),
        "events_delivered": len(tally.delivered), "events_not_delivered": len(tally.undelivered),
        "outbox_messages": len(messages),
        "receiver": {"posts": receiver.counts["posts"], "accepted": receiver.counts["accepted"],
                     "repeated_keys_absorbed": receiver.counts["repeats"]},
        "effects_per_answered_key": {str(k): v for k, v in sorted(effects_per_key.items())},
        "doubles": {k: len(v) for k, v in doubles.items()}, "lost": {k: len(v) for k, v in lost.items()},
        "double_keys": doubles, "lost_keys": lost, "failures": broken,
        "seconds_to_recover": None if recovered is None else round(recovered, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "summary.md").write_text(markdown(summary))
    return summary


def findings(
    tally: Tally, views: Counter, events: Counter, messages: set[str], accepted: Counter
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The doubles and the losses, by kind, from the effects counted per key, event and outbox
    key against what the clients were answered. A double is more than one effect; a loss is
    an answered key, an accepted delivery or a committed message with none."""
    doubles = {
        "view effects": sorted(k for k, n in views.items() if n > 1),
        "handler effects": sorted(k for k, n in events.items() if n > 1),
        "replays that ran the view": sorted(tally.replays_that_ran),
    }
    lost = {
        "answered keys without an effect": sorted(k for k in tally.answered if views[k] == 0),
        "delivered events never handled": sorted(e for e in tally.delivered if events[e] == 0),
        "committed messages never accepted": sorted(m for m in messages if accepted[m] == 0),
    }
    return doubles, lost


def failures(tally: Tally) -> list[str]:
    """What fails a run besides a double or a loss: a 500 (a fault gives a connection error or
    a 503, never a 500), and a run in which no key or no event got its answer (proves nothing)."""
    found = [f"{what.removesuffix(': 500')}: {n} answered 500" for what, n in sorted(tally.requests.items())
             if what.endswith(": 500")]
    if not tally.answered:
        found.append("no claim was answered")
    if not tally.delivered:
        found.append("no delivery was accepted")
    return found


def markdown(s: dict) -> str:
    lines = [
        f"# Soak {s['run_id']}: {s['seconds']:.0f} s", "",
        f"- requests: {s['requests_total']} ({', '.join(f'{k} {v}' for k, v in s['requests'].items())})",
        f"- faults: {', '.join(f'{k} {v}' for k, v in s['faults'].items()) or 'none'}",
        f"- keys answered {s['keys_answered']}, not answered {s['keys_not_answered']}; effects per answered key "
        f"{s['effects_per_answered_key']}",
        f"- events delivered {s['events_delivered']}, not delivered {s['events_not_delivered']}",
        f"- outbox messages {s['outbox_messages']}; receiver {s['receiver']}",
        f"- doubles: {s['doubles']}", f"- lost: {s['lost']}", f"- failures: {s['failures'] or 'none'}",
        f"- seconds to recover after the last fault: {s['seconds_to_recover']}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idemdash.devtools.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", 600)))
    parser.add_argument("--out", type=Path, default=Path("var/soak"))
    args = parser.parse_args(argv)
    if not 10 <= args.seconds <= 6 * 3600:
        parser.error("--seconds: 10 to 21600")
    if not (os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL).startswith("postgres"):
        parser.error("the soak terminates PostgreSQL backends: DATABASE_URL must be PostgreSQL")
    from idemdash.devtools.bench import servers

    servers.start_django(DEFAULT_DATABASE_URL, SETTINGS)
    from django.core.management import call_command
    from django.db import connection

    from idemdash.devtools.bench.runner import webhook_endpoint
    from idemdash.devtools.simulator import Receiver

    # A partner on 127.0.0.1 that honours Idempotency-Key and counts accepted posts per key.
    receiver = Receiver(0, failures=0.1, slow=0.02, slow_seconds=1.0, seed=1)
    receiver.start()
    os.environ["SOAK_RECEIVER_URL"] = receiver.url
    call_command("migrate", verbosity=0, interactive=False)
    # Tasks an earlier run queued were signed with its own SECRET_KEY: this run's clusters
    # could not read them, and they are of runs already counted.
    from django_q.models import OrmQ

    OrmQ.objects.all().delete()
    secret = webhook_endpoint(ENDPOINT, "make soak")
    started = datetime.now(dt_timezone.utc)
    out = args.out / started.strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    run_id = "s" + uuid.uuid4().hex[:6]
    connection.close()
    processes: dict[str, Any] = {}
    try:
        for name in ("web1", "web2"):
            port = servers.free_port()
            processes[name] = servers.start_gunicorn(port, out, workers=2, name=name, settings_module=SETTINGS)
            processes[name].url = f"http://127.0.0.1:{port}"
        for name in ("cluster1", "cluster2"):
            processes[name] = servers.start_qcluster(out, name=name, settings_module=SETTINGS)
        print(f"soak {run_id}: 2 web instances, 2 worker clusters, {args.seconds:.0f} s, writing {out}", flush=True)
        tally = Tally()
        begun = time.monotonic()
        deadline = begun + args.seconds
        bases = [processes[n].url for n in ("web1", "web2")]
        drivers = [Driver(bases, secret, run_id, deadline, tally, seed) for seed in range(CLIENT_THREADS)]
        threads = [threading.Thread(target=d.run, daemon=True) for d in drivers]
        threads.append(threading.Thread(target=faults, args=(processes, deadline, tally, 99), daemon=True))
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            time.sleep(5)
            supervise(processes, out, tally)
            print(f"  {time.monotonic() - begun:5.0f} s: {sum(tally.requests.values())} requests, "
                  f"faults {dict(tally.kills)}", flush=True)
            if time.monotonic() > deadline + GIVE_UP_SECONDS + 30:
                break
        last_fault = time.monotonic()
        recovered = None
        while time.monotonic() < last_fault + SETTLE_SECONDS:
            supervise(processes, out, tally)
            if _settled(run_id):
                recovered = time.monotonic() - last_fault
                break
            time.sleep(1)
        summary = summarize(run_id, receiver, tally, time.monotonic() - begun, recovered, out)
    finally:
        for process in processes.values():
            process.stop()
        receiver.stop()
    print((out / "summary.md").read_text(), flush=True)
    failed = (sum(summary["doubles"].values()) + sum(summary["lost"].values()) + len(summary["failures"])
              + (recovered is None))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
