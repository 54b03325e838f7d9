"""The traffic simulator behind `manage.py simulate`: a living demo of every retry path.

It drives the real HTTP endpoints of a running idemdash, never the models: agents on the JSON
API, signed Stripe and Shopify deliveries, outbox messages to a `Receiver` it runs on
127.0.0.1 (docs/demo.md, "The traffic simulator", lists each kind). Every request goes
through `LocalOnlyTransport`, which refuses any host but this machine's loopback."""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import random
import secrets
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import stripe

from idemdash_client import FreshKeyRetry, IdempotencyClient, IdempotencyKeyReused, RequestInProgress
from webhooks.verify import shopify_signature

LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
# The demo's small Stripe and Shopify objects, which the tests read from here too: one copy.
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# One shuffled deck is dealt per round, so that every kind of traffic appears in every
# stretch of len(DECK) actions rather than only on average.
DECK: dict[str, int] = {
    "agent_run": 6, "agent_timeout": 2, "agent_crash": 1, "agent_reuse": 1, "agent_failure": 1, "agent_stall": 1,
    "agent_new_key": 1, "stripe_payment": 3, "stripe_storm": 1, "stripe_redelivery": 1, "shopify_order": 2,
    "shopify_redelivery": 1, "shopify_refund": 1, "outbox_post": 3, "outbox_invoice": 1, "outbox_email": 1,
    "unprotected_refund": 1,
}
OPERATIONS = ("payment.capture", "invoice.send", "lead.enrich", "email.send")
# The kinds that stage a fault for an operator to repair: `simulate --healthy` deals none of
# them and turns the partner's 403 off, so the overview shows all clear.
STAGED_KINDS = frozenset({"agent_stall", "shopify_refund", "unprotected_refund", "agent_new_key"})
# The demo shop's refund route, which nothing protects (idemdash/devtools/shop.py).
REFUND_PATH = "/demo/shop/refunds/"


def stripe_event(obj: dict[str, Any], event_type: str, *, event_id: str | None = None, **extra: Any) -> dict:
    """A Stripe event envelope around an API object, as Stripe sends it (the webhook tests
    build theirs with it too)."""
    return {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}", "object": "event", "api_version": "2024-06-20",
        "created": int(time.time()), "data": {"object": obj}, "livemode": False, "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None}, "type": event_type, **extra,
    }


def signed_stripe(event: dict[str, Any], secret: str) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a delivery of `event`, signed as Stripe signs each attempt."""
    body = json.dumps(event)
    signature = stripe.WebhookSignature.generate_signature_header(body, secret)
    return body.encode(), {"Stripe-Signature": signature, "Content-Type": "application/json"}


class NotLocal(ValueError):
    pass


class ServerNotAnswering(RuntimeError):
    pass


def check_local(url: str) -> str:
    """The URL without a trailing slash, if it names this machine; NotLocal otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotLocal(f"{url!r} is not an http URL.")
    if parts.hostname.lower() not in LOCAL_HOSTS:
        raise NotLocal(f"The simulator only talks to this machine (127.0.0.1, localhost), not {parts.hostname!r}.")
    return url.rstrip("/")


def parse_rate(value: str | float) -> float:
    """Actions per second from `5`, `2.5` or `5/s`."""
    text = str(value).strip().removesuffix("/s")
    try:
        rate = float(text)
    except ValueError:
        raise ValueError(f"rate must be a number of actions per second such as 5 or 5/s, got {value!r}") from None
    if not 0 < rate <= 1000:
        raise ValueError(f"rate must be above 0 and at most 1000 per second, got {value!r}")
    return rate


def simulator_token(token_file: Path) -> str:
    """A bearer token for the simulator's own API client, kept in `token_file` so that runs
    share one client (tokens are stored hashed: a lost file means a new client)."""
    from idemdash.core.clients import create_token, hash_token
    from idemdash.core.models import ApiClient

    if token_file.exists():
        token = token_file.read_text().strip()
        if ApiClient.objects.filter(token_hash=hash_token(token), revoked_at=None).exists():
            return token
    name = "simulator"
    if ApiClient.objects.filter(name=name).exists():
        name = f"simulator-{secrets.token_hex(3)}"
    _, token = create_token(name)
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.touch(mode=0o600)  # before the token is in it
    token_file.write_text(token + "\n")
    return token


class LocalOnlyTransport(httpx.HTTPTransport):
    """Refuses any request to a host that is not loopback, and counts where requests went."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.destinations: Counter[str] = Counter()
        self._lock = threading.Lock()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        host = request.url.host.lower()
        if host not in LOCAL_HOSTS:
            raise NotLocal(f"refused a request to {host!r}: the simulator only talks to this machine")
        with self._lock:
            self.destinations[f"{host}:{request.url.port}"] += 1
        return super().handle_request(request)


REFUSED_PATH = "/partner/invoices"


class Receiver:
    """A partner's API on 127.0.0.1 that fails part of the time: a share of posts gets a 503
    (Retry-After: 1), another is answered after `slow_seconds`, and posts to REFUSED_PATH get
    a permanent 403 for the first `refuse_seconds` after start(), an outage that ends on its
    own. A key it accepted before is acknowledged again without acting twice, and counted."""

    def __init__(self, port: int, *, failures: float = 0.3, slow: float = 0.1, slow_seconds: float = 2.0,
                 refuse_seconds: float = 0.0, seed: int | None = None) -> None:
        if not (0 <= failures <= 1 and 0 <= slow <= 1 and failures + slow <= 1):
            raise ValueError("receiver failures and slow shares must be between 0 and 1 and add up to at most 1")
        if refuse_seconds < 0:
            raise ValueError("receiver refuse_seconds must not be negative")
        self.failures, self.slow, self.slow_seconds = failures, slow, slow_seconds
        self.refuse_seconds = refuse_seconds
        self._refuse_until = time.monotonic() + refuse_seconds
        self.counts: Counter[str] = Counter()
        # Accepted posts per Idempotency-Key: more than 1 is a repeat the key absorbed.
        self.accepted_per_key: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = receiver._answer(self.headers.get("Idempotency-Key", ""), urlsplit(self.path).path)
                answer: dict[str, Any] = {"ok": status == 200}
                if status == 403:
                    answer["error"] = (
                        f"partner outage (idemdash demo): {REFUSED_PATH} is refused for the first "
                        f"{receiver.refuse_seconds:g} s of the simulator's run; send the message again after that"
                    )
                body = json.dumps(answer).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    if status == 503:
                        self.send_header("Retry-After", "1")
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the drainer gave up on a slow answer (its timeout): it will retry

            def do_GET(self) -> None:
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the simulator's summary says what the receiver saw

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def refusing(self) -> bool:
        return self.refuse_seconds > 0 and time.monotonic() < self._refuse_until

    def _answer(self, key: str, path: str = "") -> int:
        with self._lock:
            self.counts["posts"] += 1
            if path == REFUSED_PATH and self.refusing():
                self.counts["forbidden"] += 1
                return 403
            roll = self._rng.random()
            if roll < self.failures:
                self.counts["refused"] += 1
                return 503
            slow = roll < self.failures + self.slow
            if slow:
                self.counts["slow"] += 1
        if slow:
            time.sleep(self.slow_seconds)
        with self._lock:
            self.counts["accepted"] += 1
            if key in self.accepted_per_key:
                self.counts["repeats"] += 1
            self.accepted_per_key[key] += 1
        return 200

    def start(self) -> None:
        self._refuse_until = time.monotonic() + self.refuse_seconds
        self._thread = threading.Thread(target=self.server.serve_forever, name="simulator-receiver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Config:
    base_url: str
    token: str
    rate: float = 4.0
    duration: float | None = None  # seconds; None runs until stop() is called
    actions: int | None = None  # deal this many, finish their follow-ups, and stop
    seed: int | None = None
    stripe_secret: str = ""
    shopify_secret: str = ""
    receiver_port: int = 8108
    receiver_failures: float = 0.3
    receiver_slow: float = 0.1
    receiver_slow_seconds: float = 2.0
    receiver_refuse_seconds: float = 0.0  # `manage.py simulate` defaults to 180
    crash_lease_seconds: int = 15  # the shortest lease the API allows (RECEIPTS_MIN_LEASE_SECONDS)
    failure_retry_seconds: float = 20.0  # a failed key's next attempt, on average
    stall_lease_seconds: int = 60  # the lease an agent holds when it hangs
    stall_check_seconds: float = 10.0  # how often a hung agent looks whether its key was released
    stall_give_up_seconds: float = 600.0  # past its lease, it then takes the key over itself
    max_stalled: int = 5  # hung agents waiting at once; more hang-ups crash as usual instead
    say_every: float = 10.0  # at most one line per kind of traffic this often
    summary_every: float = 15.0
    wait_for_server: float = 120.0
    max_in_flight: int = 16
    staged_faults: bool = True  # False: healthy traffic only (see STAGED_KINDS)


class Simulator:
    def __init__(self, config: Config, write: Callable[[str], None] = print) -> None:
        self.config = config
        self.base_url = check_local(config.base_url)
        self.write = write
        self.rng = random.Random(config.seed)
        # Part of every key and id, and not from the seed: a second run with the same seed
        # must make new intents, not replay the first run's.
        self.run_id = secrets.token_hex(2)
        self.stopping = threading.Event()
        self.tally: Counter[str] = Counter()
        self.transport = LocalOnlyTransport()
        self.http = httpx.Client(base_url=self.base_url, transport=self.transport, timeout=20.0)
        self.idem = IdempotencyClient(self.base_url, config.token, wait_seconds=0, transport=self.transport,
                                      max_in_progress_retries=0)
        self.receiver = Receiver(config.receiver_port, failures=config.receiver_failures, slow=config.receiver_slow,
                                 slow_seconds=config.receiver_slow_seconds,
                                 refuse_seconds=config.receiver_refuse_seconds,
                                 seed=None if config.seed is None else config.seed + 1)
        self._numbers = itertools.count(1)  # orders, invoices, payments: numbered in deal order
        self._sequence = itertools.count()  # tie-breaker of the follow-up heap
        self._lock = threading.Lock()
        self._later: list[tuple[float, int, str, Callable[[], None]]] = []
        self._last_said: dict[str, float] = {}
        self._hushed: Counter[str] = Counter()
        self._stripe_sent: deque[tuple[list[dict[str, Any]], float]] = deque(maxlen=40)  # (events, sent at)
        self._shopify_sent: deque[tuple[bytes, dict[str, str], float]] = deque(maxlen=40)
        self._deck: list[str] = []
        self._stalled: set[str] = set()
        self._said_refusal_over = False
        self._warned: set[str] = set()
        self._started = time.monotonic()
        self.kinds = [k for k in DECK if self._enabled(k)]
        fixtures = json.loads((FIXTURES / "stripe_objects.json").read_text())
        self._checkout, self._intent = fixtures["checkout.session"], fixtures["payment_intent"]
        self._order = json.loads((FIXTURES / "shopify_order.json").read_text())

    def _enabled(self, kind: str) -> bool:
        if kind in STAGED_KINDS and not self.config.staged_faults:
            return False
        if kind.startswith("stripe"):
            return bool(self.config.stripe_secret)
        if kind.startswith("shopify"):
            return bool(self.config.shopify_secret)
        return True

    def count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.tally[name] += n

    def say(self, kind: str, text: str) -> None:
        """One line per kind of traffic every `say_every` seconds, not one per action."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_said.get(kind, -1e9) < self.config.say_every:
                self._hushed[kind] += 1
                return
            self._last_said[kind] = now
            hushed, self._hushed[kind] = self._hushed[kind], 0
        more = f"  (+{hushed} more like it)" if hushed else ""
        self.write(f"{text}{more}")

    def warn_once(self, topic: str, text: str) -> None:
        with self._lock:
            if topic in self._warned:
                return
            self._warned.add(topic)
        self.write(f"! {text}")

    def _remember(self, sent: deque, item: Any) -> None:
        with self._lock:
            sent.append(item)

    def _earlier(self, sent: deque) -> list[Any]:
        """What was sent before the newest delivery (redelivering it is out of order), or
        the only one sent so far."""
        with self._lock:
            return list(sent)[:-1] or list(sent)

    def later(self, delay: float, what: str, fn: Callable[[], None]) -> None:
        with self._lock:
            heapq.heappush(self._later, (time.monotonic() + delay, next(self._sequence), what, fn))

    def key(self, noun: str, n: int) -> str:
        return f"{noun}-{self.run_id}-{n}"

    def agent(self, rng: random.Random) -> str:
        return f"agent {rng.randint(1, 12)}"

    def summary(self) -> str:
        t, r = self.tally, self.receiver.counts
        elapsed = int(time.monotonic() - self._started)
        claims = t["claimed"] + t["replayed"] + t["409"] + t["422"] + t["takeover"] + t["retried"] + t["came_back"]
        with self._lock:
            stalled = len(self._stalled)
        parts = [
            f"[{elapsed // 60}:{elapsed % 60:02d}] receipts: {claims} claims ({t['claimed']} ran, "
            f"{t['replayed']} replayed, {t['409']} x 409, {t['422']} x 422, {t['crashed']} crashed, "
            f"{t['takeover']} taken over, {t['failed']} failed, {t['retried']} retried, "
            f"{stalled} hung waiting for a release, {t['came_back']} came back after a release)",
        ]
        if self.config.stripe_secret or self.config.shopify_secret:
            parts.append(
                f"webhooks: {t['webhook.stored']} events from {t['webhook.deliveries']} deliveries "
                f"({t['webhook.duplicates']} duplicates, {t['webhook.rejected']} rejected)"
            )
        parts.append(
            f"outbox: {t['outbox.enqueued']} enqueued ({t['outbox.again']} again by key); receiver: "
            f"{r['posts']} posts, {r['refused']} x 503, {r['forbidden']} x 403, {r['slow']} slow, {r['repeats']} repeats"
        )
        if t["shop.refunds"]:
            parts.append(f"shop: {t['shop.refunds']} refunds posted to {REFUND_PATH}, {t['shop.twice']} retried and refunded twice")
        if t["errors"] or t["busy"]:
            parts.append(f"{t['errors']} errors, {t['busy']} times all {self.config.max_in_flight} actions in flight (server busy)")
        return " | ".join(parts)

    def stop(self) -> None:
        self.stopping.set()

    def wait_for_server(self) -> None:
        deadline = time.monotonic() + self.config.wait_for_server
        said = False
        while not self.stopping.is_set():
            try:
                self.http.get("/accounts/login/", timeout=2.0)
                return
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise ServerNotAnswering(f"{self.base_url} did not answer within {self.config.wait_for_server:g} s")
                if not said:
                    self.write(f"waiting for {self.base_url} to answer ...")
                    said = True
                self.stopping.wait(0.5)

    def run(self) -> Counter[str]:
        cfg = self.config
        self.receiver.start()
        try:
            self.wait_for_server()
            self._started = time.monotonic()
            skipped = [name for name, on in (("Stripe", cfg.stripe_secret), ("Shopify", cfg.shopify_secret)) if not on]
            self.write(
                f"simulating {cfg.rate:g} actions/s against {self.base_url}/ (run {self.run_id}"
                f"{', seed ' + str(cfg.seed) if cfg.seed is not None else ''}); outbox receiver at "
                f"{self.receiver.url} refusing {cfg.receiver_failures:.0%}, slow for {cfg.receiver_slow:.0%}"
                + (f", {REFUSED_PATH} refused (403) for {cfg.receiver_refuse_seconds:g} s" if cfg.receiver_refuse_seconds else "")
                + (f"; no {' or '.join(skipped)} traffic: its webhook secret is not set" if skipped else "")
            )
            self._loop()
        finally:
            self.receiver.stop()
            self.http.close()
            self.idem.close()
        self.write("stopped. " + self.summary())
        return self.tally

    def _loop(self) -> None:
        cfg = self.config
        interval = 1.0 / cfg.rate
        start = time.monotonic()
        end = start + cfg.duration if cfg.duration is not None else None
        next_action = start
        next_summary = start + cfg.summary_every
        in_flight = threading.BoundedSemaphore(cfg.max_in_flight)
        pool = ThreadPoolExecutor(max_workers=cfg.max_in_flight + 4, thread_name_prefix="simulator")

        dealt = 0
        active = [0]  # jobs submitted and not finished, follow-ups included

        def submit(what: str, fn: Callable[[], None], *, slot: bool) -> None:
            with self._lock:
                active[0] += 1

            def job() -> None:
                try:
                    fn()
                except Exception as exc:  # one action's failure must not stop the simulation
                    if self.stopping.is_set():
                        return  # cut short by the stop (the demo's server may stop first)
                    self.count("errors")
                    self.say(f"error:{type(exc).__name__}", f"{what}: {type(exc).__name__}: {str(exc)[:200]}")
                finally:
                    with self._lock:
                        active[0] -= 1
                    if slot:
                        in_flight.release()

            pool.submit(job)

        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                if end is not None and now >= end:
                    break
                if cfg.actions is not None and dealt >= cfg.actions:
                    with self._lock:
                        if not active[0] and not self._later:
                            break  # every action dealt and every story it began is told
                    next_action = float("inf")
                while True:
                    with self._lock:
                        if not self._later or self._later[0][0] > now:
                            break
                        _, _, what, fn = heapq.heappop(self._later)
                    # Follow-ups (takeovers, retries) finish stories already begun: never dropped.
                    submit(what, fn, slot=False)
                if now >= next_action:
                    if in_flight.acquire(blocking=False):
                        kind = self._deal()
                        # Numbers and randomness are drawn here, in deal order, so that a seed
                        # gives the same traffic whatever the threads' timing.
                        action, n = getattr(self, f"_{kind}"), next(self._numbers)
                        submit(kind, functools.partial(action, n, random.Random(self.rng.getrandbits(64))), slot=True)
                        dealt += 1
                    else:
                        # A slow server: the next card waits for a free slot, so the rate
                        # drops but every kind of traffic still comes in its turn.
                        self.count("busy")
                    next_action += interval
                    if next_action < now - 1:  # fell behind: do not burst to catch up
                        next_action = now + interval
                if cfg.receiver_refuse_seconds and not self._said_refusal_over and not self.receiver.refusing():
                    self._said_refusal_over = True
                    self.write(f"partner: {REFUSED_PATH} accepts posts again: its dead outbox messages can be sent again now")
                if now >= next_summary:
                    self.write(self.summary())
                    next_summary += cfg.summary_every
                with self._lock:
                    next_later = self._later[0][0] if self._later else next_action
                wake = min(next_action, next_summary, next_later, end if end is not None else next_summary)
                self.stopping.wait(max(0.005, min(0.5, wake - time.monotonic())))
        finally:
            # In-flight actions are short (at most a few seconds) and finish what they started.
            pool.shutdown(wait=True, cancel_futures=True)

    def _deal(self) -> str:
        if not self._deck:
            self._deck = [kind for kind in self.kinds for _ in range(DECK[kind])]
            self.rng.shuffle(self._deck)
        return self._deck.pop()

    def _request(self, n: int, rng: random.Random) -> dict[str, Any]:
        return {"order": n, "amount": rng.choice([900, 1500, 2500, 4200, 9900]), "currency": "eur"}

    def _agent_intent(self, noun: str, operation: str, n: int, rng: random.Random) -> tuple[str, str, str, dict[str, Any]]:
        """The agent that acts, the key of its `noun` n, the operation, and the request it sends."""
        return self.agent(rng), self.key(noun, n), operation, self._request(n, rng)

    def _work(self, rng: random.Random) -> Callable[[], dict[str, Any]]:
        def work() -> dict[str, Any]:
            time.sleep(rng.uniform(0.02, 0.25))
            return {"ok": True, "ref": f"ref_{rng.getrandbits(40):x}"}

        return work

    def _agent_run(self, n: int, rng: random.Random) -> None:
        agent, key, operation, request = self._agent_intent("order", rng.choice(OPERATIONS), n, rng)
        self.idem.run_once(key, operation, self._work(rng), request=request, lease_seconds=15)
        self.count("claimed")
        if rng.random() < 0.4:
            # The same job delivered twice (a queue redelivery): the second run is a replay.
            ran = []
            self.idem.run_once(key, operation, lambda: ran.append(1), request=request)
            self.count("claimed" if ran else "replayed")
            self.say("agent_run", f"{agent}: ran {operation} for {key}, ran it again -> replayed, no second side effect")
        else:
            self.say("agent_run", f"{agent}: ran {operation} for {key}")

    def _agent_timeout(self, n: int, rng: random.Random) -> None:
        agent, key, operation, request = self._agent_intent("invoice", "invoice.send", n, rng)
        first = self.idem.claim(key, operation, request, lease_seconds=15)
        self.count("claimed")
        time.sleep(rng.uniform(0.05, 0.2))
        try:
            self.idem.claim(key, operation, request)  # the caller gave up waiting and retries
            self.count("claimed")
        except RequestInProgress as busy:
            self.count("409")
            retry_after = busy.retry_after
        else:
            retry_after = 0
        time.sleep(rng.uniform(0.2, 1.0))
        self.idem.complete(key, first.token, {"sent": True, "invoice": n})
        again = self.idem.claim(key, operation, request)
        self.count("replayed" if again.replayed else "claimed")
        self.say("agent_timeout", f"{agent}: timed out on {key} and retried while it ran -> 409 (Retry-After "
                                  f"{retry_after} s); retried after it finished -> {again.outcome}")

    def _agent_crash(self, n: int, rng: random.Random) -> None:
        agent, key, operation, request = self._agent_intent("order", "payment.capture", n, rng)
        lease = self.config.crash_lease_seconds
        self.idem.claim(key, operation, request, lease_seconds=lease)
        self.count("claimed")
        self.count("crashed")
        self.say("agent_crash", f"{agent}: claimed {key}, crashed mid-operation (lease {lease} s)")
        # Another agent finds the key once its lease lapsed, and takes it over at once (give_up 0).
        self.later(lease + rng.uniform(0.3, 2.0), f"takeover of {key}",
                   lambda: self._come_back(key, operation, request, self.agent(rng), give_up=0.0))

    def _agent_reuse(self, n: int, rng: random.Random) -> None:
        agent, key, operation, request = self._agent_intent("refund", "refund.create", n, rng)
        self.idem.run_once(key, operation, self._work(rng), request=request)
        self.count("claimed")
        changed = {**request, "amount": request["amount"] + 200}
        try:
            self.idem.claim(key, operation, changed)
            self.count("claimed")
            outcome = "accepted?!"
        except IdempotencyKeyReused:
            self.count("422")
            outcome = "422 key reused"
        self.say("agent_reuse", f"{agent}: reused {key} with a changed amount ({request['amount']} -> {changed['amount']}) -> {outcome}")

    def _agent_new_key(self, n: int, rng: random.Random) -> None:
        """An agent whose tool call timed out retries it under a key it minted again: the key
        cannot tell, the request can. Its operation allows such retries, so the email goes out
        twice, and both receipts name each other (a fresh-key retry)."""
        agent = self.agent(rng)
        operation, request = "email.send", {"to": f"lead-{n}@example.com", "template": "welcome"}
        first, again = self.key("welcome", n), self.key("welcome-retry", n)
        self.idem.run_once(first, operation, self._work(rng), request=request)
        self.count("claimed")
        try:
            self.idem.run_once(again, operation, self._work(rng), request=request)
            self.count("fresh_key.ran_again")
            outcome = "sent again"
        except FreshKeyRetry as refused:  # under "fresh_key": "refuse"
            self.count("fresh_key.refused")
            outcome = f"409 fresh-key-retry, first key {refused.first_key}"
        self.say("agent_new_key", f"{agent}: timed out sending {first}, retried under a new key {again} -> {outcome}")

    def _agent_failure(self, n: int, rng: random.Random) -> None:
        agent, key, operation, request = self._agent_intent("charge", "charge.create", n, rng)
        # A third of the failing keys fail on their first retry too: "keys failing repeatedly".
        failures = 2 if rng.random() < 1 / 3 else 1

        def attempt(tries: int) -> None:
            ran = []

            def work() -> dict[str, Any]:
                ran.append(1)
                if tries < failures:
                    raise RuntimeError("card processor timed out")
                return {"charged": True}

            try:
                self.idem.run_once(key, operation, work, request=request)
            except RuntimeError:
                self.count("claimed" if tries == 0 else "retried")
                self.count("failed")
                self.say("agent_failure", f"{agent}: {operation} for {key} failed (card processor timed out); will retry")
                delay = self.config.failure_retry_seconds * rng.uniform(0.5, 1.5)
                self.later(delay, f"retry of {key}", lambda: attempt(tries + 1))
                return
            self.count("retried" if ran else "replayed")
            self.say("retry", f"{agent}: retried {key} after {tries} failure(s) -> ran again, completed")

        attempt(0)

    def _agent_stall(self, n: int, rng: random.Random) -> None:
        """An agent that hangs holding a long lease: past the lease its receipt is on the
        Stuck board, and the agent waits for an operator to release the key, then runs it."""
        with self._lock:
            room = len(self._stalled) < self.config.max_stalled
        if not room:  # enough of the Stuck board is filled: crash as usual
            return self._agent_crash(n, rng)
        agent, key, operation, request = self._agent_intent("lead", "lead.enrich", n, rng)
        lease = self.config.stall_lease_seconds
        self.idem.claim(key, operation, request, lease_seconds=lease)
        with self._lock:
            self._stalled.add(key)
        self.count("claimed")
        self.count("hung")
        self.say("agent_stall", f"{agent}: claimed {key} and hung (lease {lease} s); it waits for an operator to release it")
        give_up = time.monotonic() + lease + self.config.stall_give_up_seconds
        self.later(lease, f"come back for {key}", lambda: self._come_back(key, operation, request, agent, give_up))

    def _come_back(self, key: str, operation: str, request: dict[str, Any], agent: str, give_up: float,
                   tries: int = 0) -> None:
        """Run a key an agent left held once it is no longer held (an operator released it), or
        take it over at `give_up`, so that a demo nobody repairs stays bounded."""
        receipt = self.idem.get(key)
        held = receipt is not None and receipt["status"] == "processing"
        if held and time.monotonic() < give_up and not self.stopping.is_set():
            self.later(self.config.stall_check_seconds, f"come back for {key}",
                       lambda: self._come_back(key, operation, request, agent, give_up))
            return
        with self._lock:
            self._stalled.discard(key)
        if self.stopping.is_set() and held:
            return
        ran = []
        try:
            self.idem.run_once(key, operation, lambda: ran.append(1) or {"recovered": True}, request=request)
        except RequestInProgress:
            self.count("409")
            if tries < 5:  # the lease has not quite lapsed by the server's clock
                self.later(1.0, f"takeover of {key}",
                           lambda: self._come_back(key, operation, request, agent, give_up, tries + 1))
            return
        if held:
            self.count("takeover")
            self.say("takeover", f"{agent}: found {key} held past its lease, nobody released it -> took it over, completed")
        else:
            self.count("came_back" if ran else "replayed")
            self.say("came_back", f"{agent}: came back for {key} after it was released -> ran it, completed")

    def _deliver(self, provider: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        reply = self.http.post(f"/webhooks/{provider}/", content=body,
                               headers={"Content-Type": "application/json", **headers})
        self.count("webhook.deliveries")
        if reply.status_code != 200:
            self.count("webhook.rejected")
            self.warn_once(f"webhook-{reply.status_code}", f"{provider} delivery answered {reply.status_code}: "
                                                           f"{reply.text[:200]}")
            return {}
        data = reply.json()
        self.count("webhook.duplicates" if data.get("duplicate") else "webhook.stored")
        return data

    def _stripe_send(self, event: dict[str, Any]) -> dict[str, Any]:
        # Stripe signs every attempt anew, so a redelivery carries a fresh timestamp.
        return self._deliver("stripe", *signed_stripe(event, self.config.stripe_secret))

    def _stripe_events(self, n: int, rng: random.Random) -> list[dict[str, Any]]:
        amount = rng.choice([1200, 2500, 4900, 9900])
        intent_id, session_id = f"pi_sim{self.run_id}{n:06d}", f"cs_sim{self.run_id}{n:06d}"
        session = {**self._checkout, "id": session_id, "payment_intent": intent_id, "amount_total": amount}
        intent = {**self._intent, "id": intent_id, "amount": amount, "amount_received": amount}

        event_id = f"evt_sim{self.run_id}{n:06d}"
        return [
            stripe_event(session, "checkout.session.completed", event_id=f"{event_id}c"),
            stripe_event(intent, "payment_intent.succeeded", event_id=f"{event_id}p"),
        ]

    def _stripe_payment(self, n: int, rng: random.Random) -> None:
        events = self._stripe_events(n, rng)
        out_of_order = rng.random() < 0.3
        if out_of_order:  # Stripe does not promise order: the intent may come first
            events.reverse()
        for event in events:
            self._stripe_send(event)
        self._remember(self._stripe_sent, (events, time.monotonic()))
        order = "payment_intent.succeeded before checkout.session.completed" if out_of_order else "checkout.session.completed, payment_intent.succeeded"
        self.say("stripe_payment", f"stripe: payment {events[0]['data']['object']['id'].replace('cs_', 'pi_')}: {order}")

    def _stripe_storm(self, n: int, rng: random.Random) -> None:
        event = self._stripe_events(n, rng)[0]
        times = rng.randint(5, 10)
        gate = threading.Barrier(times)
        replies: list[dict[str, Any]] = []

        def one() -> None:
            gate.wait(timeout=10)
            replies.append(self._stripe_send(event))

        with ThreadPoolExecutor(times) as storm:
            for sent in [storm.submit(one) for _ in range(times)]:
                sent.result()  # a delivery that failed fails the action, as any other does
        stored = sum(1 for r in replies if r.get("received"))
        self.say("stripe_storm", f"stripe: retry storm, {event['id']} delivered {times} times at once -> {stored} "
                                 f"stored, {sum(1 for r in replies if r.get('duplicate'))} duplicates")

    def _stripe_redelivery(self, n: int, rng: random.Random) -> None:
        earlier = self._earlier(self._stripe_sent)
        if not earlier:
            return self._stripe_payment(n, rng)
        events, sent_at = rng.choice(earlier)
        event = rng.choice(events)
        self._said_redelivery("stripe_redelivery", f"stripe: redelivered {event['id']}", sent_at, self._stripe_send(event),
                              ", after newer events")

    def _said_redelivery(self, kind: str, what: str, sent_at: float, reply: dict[str, Any], late: str = "") -> None:
        self.say(kind, f"{what} from {time.monotonic() - sent_at:.0f} s ago{late} -> "
                       f"{'duplicate' if reply.get('duplicate') else 'stored'} (deliveries {reply.get('deliveries', 1)})")

    def _shopify_send(self, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        signed = {**headers, "X-Shopify-Hmac-Sha256": shopify_signature(body, self.config.shopify_secret)}
        return self._deliver("shopify", body, signed)

    def _shopify_headers(self, topic: str, rng: random.Random) -> dict[str, str]:
        return {"X-Shopify-Topic": topic, "X-Shopify-Shop-Domain": "idemdash-demo.myshopify.com",
                "X-Shopify-Webhook-Id": str(uuid.UUID(int=rng.getrandbits(128))),
                "X-Shopify-Event-Id": str(uuid.UUID(int=rng.getrandbits(128))), "X-Shopify-API-Version": "2025-01"}

    def _shopify_order(self, n: int, rng: random.Random) -> None:
        total = f"{rng.choice([19, 49, 89, 199])}.00"
        order = {**self._order, "id": int(f"82{rng.getrandbits(40)}"), "name": f"#{1000 + n}", "order_number": 1000 + n,
                 "total_price": total, "subtotal_price": total}
        body = json.dumps(order).encode()
        headers = self._shopify_headers("orders/create", rng)
        self._shopify_send(body, headers)
        self._remember(self._shopify_sent, (body, headers, time.monotonic()))
        self.say("shopify_order", f"shopify: orders/create {order['name']} ({total} EUR)")

    def _shopify_redelivery(self, n: int, rng: random.Random) -> None:
        earlier = self._earlier(self._shopify_sent)
        if not earlier:
            return self._shopify_order(n, rng)
        body, headers, sent_at = rng.choice(earlier)
        self._said_redelivery("shopify_redelivery", f"shopify: redelivered webhook {headers['X-Shopify-Webhook-Id'][:8]}...",
                              sent_at, self._shopify_send(body, headers))

    def _shopify_refund(self, n: int, rng: random.Random) -> None:
        """A refund of an order sent earlier: its demo handler fails while the `refunds` demo
        switch is on, so these events retry and go dead until an operator fixes it."""
        earlier = self._earlier(self._shopify_sent)
        if not earlier:
            return self._shopify_order(n, rng)
        order_body, _, _ = rng.choice(earlier)
        order = json.loads(order_body)
        amount = order.get("total_price") or "19.00"
        refund = {"id": int(f"83{rng.getrandbits(40)}"), "order_id": order["id"],
                  "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "note": "customer returned the item",
                  "refund_line_items": [],
                  "transactions": [{"kind": "refund", "status": "success", "amount": amount, "currency": "EUR"}]}
        headers = self._shopify_headers("refunds/create", rng)
        self._shopify_send(json.dumps(refund).encode(), headers)
        self.count("webhook.refunds")
        self.say("shopify_refund", f"shopify: refunds/create for order {order.get('name')} ({amount} EUR)")

    def _refund(self, body: dict[str, Any]) -> str:
        reply = self.http.post(REFUND_PATH, json=body, headers={"Authorization": f"Bearer {self.config.token}"})
        reply.raise_for_status()
        self.count("shop.refunds")
        return reply.json()["refund"]

    def _unprotected_refund(self, n: int, rng: random.Random) -> None:
        """A refund whose client timed out and retried it: the route has no key, so the retry
        refunds again, and the observer counts it as a would-be duplicate."""
        body = {"order": n, "amount": rng.choice([500, 1200, 4200]), "currency": "eur"}
        first = self._refund(body)

        def retry() -> None:
            again = self._refund(body)
            self.count("shop.twice")
            self.say("unprotected_refund", f"shop: refund of order {n} retried after a client timeout on {REFUND_PATH}, "
                                           f"which nothing protects -> refunded twice ({first}, {again})")

        self.later(rng.uniform(1, 5), f"refund retry {n}", retry)

    def _enqueue(self, key: str, action: str, payload: dict[str, Any]) -> httpx.Response:
        reply = self.http.post("/api/v1/outbox", json={"key": key, "action": action, "payload": payload},
                               headers={"Authorization": f"Bearer {self.config.token}"})
        if reply.status_code in (200, 201):
            self.count("outbox.enqueued" if reply.status_code == 201 else "outbox.again")
        else:
            self.count("errors")
            hint = ""
            if "OUTBOX_HTTP_ALLOWED_HOSTS" in reply.text:
                hint = " (add 127.0.0.1 to OUTBOX_HTTP_ALLOWED_HOSTS, as `make demo` does)"
            self.warn_once(f"outbox-{reply.status_code}", f"outbox refused a message: {reply.status_code} {reply.text[:200]}{hint}")
        return reply

    def _outbox_post(self, n: int, rng: random.Random) -> None:
        key = self.key("notify", n)
        payload = {"url": f"{self.receiver.url}/partner/orders", "json": {"order": n, "event": "paid"}}
        reply = self._enqueue(key, "http.post", payload)
        again = rng.random() < 0.25
        if again:  # the caller was not sure the first enqueue went through
            self._enqueue(key, "http.post", payload)
        self.say("outbox_post", f"outbox: http.post {key} -> {reply.status_code}"
                                + (", enqueued again with its key -> nothing added" if again else ""))

    def _outbox_invoice(self, n: int, rng: random.Random) -> None:
        key = self.key("invoice-copy", n)
        reply = self._enqueue(key, "http.post", {"url": f"{self.receiver.url}{REFUSED_PATH}",
                                                 "json": {"invoice": n, "amount": rng.choice([900, 4200])}})
        refused = " (the partner refuses this path for now: it will go dead)" if self.receiver.refusing() else ""
        self.say("outbox_invoice", f"outbox: http.post {key} to {REFUSED_PATH} -> {reply.status_code}{refused}")

    def _outbox_email(self, n: int, rng: random.Random) -> None:
        key = self.key("receipt-email", n)
        reply = self._enqueue(key, "email.send", {"to": f"customer-{n}@example.test", "subject": f"Your order #{1000 + n}",
                                                  "body": "Thanks!"})
        self.say("outbox_email", f"outbox: email.send {key} -> {reply.status_code}")
