from __future__ import annotations

import threading
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
import pytest
from django.utils import timezone

from idemdash.devtools import simulator
from idemdash.devtools.simulator import Config, LocalOnlyTransport, NotLocal, Receiver, Simulator
from receipts import coverage, fresh_keys, observe, store
from idemdash.core.clients import create_token
from receipts.models import Attempt, Receipt
from receipts.outbox.models import OutboxMessage
from webhooks.models import RejectedDelivery, WebhookEvent
from tests.clock import held_clock
from tests.waits import until

STRIPE_SECRET = "whsec_simulator_test_0123456789"
SHOPIFY_SECRET = "shpss_simulator_test_0123456789"


# --- only this machine ------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8107/", "http://[::1]:8000"])
def test_it_accepts_loopback_urls(url):
    assert simulator.check_local(url) == url.rstrip("/")


@pytest.mark.parametrize(
    "url", ["http://example.com", "http://10.0.0.5:8000", "http://127.0.0.1.nip.io", "ftp://127.0.0.1/", "127.0.0.1:8000"]
)
def test_it_refuses_any_other_host(url):
    with pytest.raises(NotLocal):
        simulator.check_local(url)


def test_its_transport_refuses_a_request_to_another_host_before_connecting():
    transport = LocalOnlyTransport()
    with httpx.Client(transport=transport) as client, pytest.raises(NotLocal):
        client.get("http://example.com/")
    assert transport.destinations == {}


@pytest.mark.parametrize("value, rate", [("4", 4.0), ("2.5/s", 2.5), (10, 10.0)])
def test_it_reads_a_rate_with_or_without_per_second(value, rate):
    assert simulator.parse_rate(value) == rate


@pytest.mark.parametrize("value", ["0", "-1", "fast", "5/min", "5000"])
def test_it_refuses_a_rate_that_is_not_a_positive_number_per_second(value):
    with pytest.raises(ValueError):
        simulator.parse_rate(value)


# --- the outbox receiver ----------------------------------------------------------------------


def _post(receiver: Receiver, key: str) -> httpx.Response:
    return httpx.post(receiver.url + "/partner/orders", json={"n": 1}, headers={"Idempotency-Key": key}, timeout=10)


def test_the_receiver_refuses_the_configured_share_with_503_and_retry_after():
    receiver = Receiver(0, failures=1.0, slow=0.0)
    receiver.start()
    try:
        replies = [_post(receiver, f"k-{i}") for i in range(5)]
    finally:
        receiver.stop()
    assert [r.status_code for r in replies] == [503] * 5
    assert all(r.headers["Retry-After"] == "1" for r in replies)
    assert receiver.counts == {"posts": 5, "refused": 5}


def test_the_receiver_accepts_the_rest_and_counts_a_key_accepted_twice():
    receiver = Receiver(0, failures=0.0, slow=0.0)
    receiver.start()
    try:
        statuses = [_post(receiver, key).status_code for key in ("a", "b", "a")]
    finally:
        receiver.stop()
    assert statuses == [200, 200, 200]
    assert receiver.counts == {"posts": 3, "accepted": 3, "repeats": 1}


def test_the_receiver_refuses_the_invoices_path_permanently_for_a_while_then_accepts_it(monkeypatch):
    clock = held_clock(monkeypatch, simulator)  # the outage's 4 s pass when the test says so
    receiver = Receiver(0, failures=0.0, slow=0.0, refuse_seconds=4)
    receiver.start()
    try:
        def post(path: str) -> httpx.Response:
            return httpx.post(receiver.url + path, json={}, headers={"Idempotency-Key": path}, timeout=10)

        refused, other = post("/partner/invoices"), post("/partner/orders")
        clock.advance(4.2)
        later = post("/partner/invoices")
    finally:
        receiver.stop()
    # 403 is permanent for the outbox (receipts.outbox.actions): the message goes dead at once.
    assert (refused.status_code, other.status_code, later.status_code) == (403, 200, 200)
    assert "partner outage" in refused.json()["error"]
    assert receiver.counts == {"posts": 3, "forbidden": 1, "accepted": 2}


def test_the_receiver_refuses_shares_that_add_up_to_more_than_everything():
    with pytest.raises(ValueError):
        Receiver(0, failures=0.8, slow=0.3)


# --- a bounded run against a live server ------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_bounded_run_drives_every_kind_of_traffic_through_the_real_endpoints(live_server, settings):
    settings.STRIPE_WEBHOOK_SECRET = STRIPE_SECRET
    settings.SHOPIFY_WEBHOOK_SECRET = SHOPIFY_SECRET
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]  # as `make demo` sets it
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # the crashed and hung agents' 1 s leases
    _, token = create_token("simulator-test")
    lines: list[str] = []
    sim = Simulator(
        Config(
            base_url=live_server.url,
            token=token,
            rate=25,
            actions=2 * sum(simulator.DECK.values()),  # every kind of traffic twice, however slow the server
            duration=120,  # a cap, never reached unless something hangs
            seed=7,
            stripe_secret=STRIPE_SECRET,
            shopify_secret=SHOPIFY_SECRET,
            receiver_port=0,
            crash_lease_seconds=1,
            failure_retry_seconds=0.5,
            stall_lease_seconds=1,
            stall_check_seconds=0.3,
            stall_give_up_seconds=1,  # nobody releases here: the hung agents take their keys over
            say_every=0.5,
            summary_every=2,
            wait_for_server=10,
        ),
        write=lines.append,
    )
    tally = sim.run()

    assert tally["errors"] == 0, "\n".join(lines)
    # Every path of the receipt state machine was taken, as the server recorded it.
    outcomes = set(Attempt.objects.values_list("outcome", flat=True))
    assert {
        "claimed", "replayed", "in_progress", "mismatch", "lease_takeover", "retried_after_failure",
        "completed", "failed",
    } <= outcomes, outcomes
    assert Attempt.objects.filter(receipt__scope="client:simulator-test").count() == Attempt.objects.count()

    for provider in ("stripe", "shopify"):
        events = WebhookEvent.objects.filter(provider=provider)
        assert events.exists(), provider
        assert events.filter(delivery_count__gt=1).exists(), f"no {provider} redelivery or storm reached the server"
    assert WebhookEvent.objects.filter(provider="stripe", delivery_count__gte=5).exists()  # a retry storm
    assert RejectedDelivery.objects.count() == 0

    posts = OutboxMessage.objects.filter(action="http.post")
    assert posts.exists() and OutboxMessage.objects.filter(action="email.send").exists()
    assert {m.payload["url"] for m in posts} == {sim.receiver.url + "/partner/orders", sim.receiver.url + "/partner/invoices"}
    assert WebhookEvent.objects.filter(provider="shopify", event_type="refunds/create").exists()
    # Hung agents, once nobody released their keys in time, took them over and completed.
    assert tally["hung"] >= 2 and tally["came_back"] == 0
    # The refunds retried where nothing protects them, as the observer counted them.
    observe.flush()
    noted = coverage.unprotected_counts(timezone.now() - timedelta(hours=1))[("POST", "demo/shop/refunds/")]
    assert noted["duplicates"] == tally["shop.twice"] == 2 and noted["requests"] == tally["shop.refunds"] == 4
    # The emails sent again under a new key, as the receipts count them.
    retried = fresh_keys.counts(timezone.now() - timedelta(hours=1))["email.send"]
    assert retried == {"allowed": tally["fresh_key.ran_again"], "refused": 0} and tally["fresh_key.ran_again"] == 2
    assert not Receipt.objects.filter(status="processing").exists()

    # Every request went to the live server; the receiver is called by the drain, not by the simulator.
    server = urlsplit(live_server.url)
    assert set(sim.transport.destinations) == {f"{server.hostname}:{server.port}"}
    assert any(line.startswith("stopped. [") for line in lines)
    assert any("crashed mid-operation" in line for line in lines)


@pytest.mark.django_db(transaction=True)
def test_a_hung_agent_waits_for_an_operators_release_then_runs_its_key(live_server, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # the hung agent's 1 s lease
    _, token = create_token("simulator-stall")
    lines: list[str] = []
    sim = Simulator(
        Config(base_url=live_server.url, token=token, rate=20, actions=1, duration=60, seed=5, receiver_port=0,
               stall_lease_seconds=1, stall_check_seconds=0.2, stall_give_up_seconds=60, say_every=0, wait_for_server=10),
        write=lines.append,
    )
    sim.kinds = ["agent_stall"]
    looks: list[str] = []  # the hung agent's looks at its key (Simulator._come_back)
    look = sim.idem.get
    sim.idem.get = lambda key: looks.append(key) or look(key)
    runner = threading.Thread(target=sim.run)
    runner.start()
    try:
        stuck = until(lambda: list(Receipt.objects.filter(status="processing", lease_expires_at__lt=_now())),
                      "the hung agent's key past its lease")
        seen = len(looks)
        until(lambda: len(looks) >= seen + 3, "three more looks by the agent")  # it leaves a held key alone
        receipt = Receipt.objects.get(pk=stuck[0].pk)
        assert (receipt.status, receipt.attempts) == ("processing", 1)

        store.release(receipt, actor="admin:ops", reason="agent hung")
    finally:
        runner.join(timeout=30)
    assert not runner.is_alive()
    receipt.refresh_from_db()
    assert receipt.status == "completed"
    outcomes = list(Attempt.objects.filter(key=receipt.key).order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["claimed", "released", "retried_after_failure", "completed"]
    assert sim.tally["came_back"] == 1 and sim.tally["takeover"] == 0
    assert any("came back for" in line for line in lines)


def _now():
    from django.utils import timezone

    return timezone.now()


@pytest.mark.django_db(transaction=True)
def test_without_webhook_secrets_it_sends_no_webhooks_and_says_so(live_server):
    _, token = create_token("simulator-quiet")
    lines: list[str] = []
    sim = Simulator(
        Config(base_url=live_server.url, token=token, rate=20, duration=1.5, seed=1, receiver_port=0, wait_for_server=10),
        write=lines.append,
    )
    sim.run()
    assert WebhookEvent.objects.count() == 0 and RejectedDelivery.objects.count() == 0
    assert Attempt.objects.exists()
    assert "no Stripe or Shopify traffic: its webhook secret is not set" in lines[0]


def test_it_gives_up_when_the_server_never_answers(unused_port):
    sim = Simulator(
        Config(base_url=f"http://127.0.0.1:{unused_port}", token="idem_x", receiver_port=0, wait_for_server=1),
        write=lambda line: None,
    )
    with pytest.raises(simulator.ServerNotAnswering):
        sim.run()


@pytest.fixture
def unused_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the deal ---------------------------------------------------------------------------------


def _dealt(seed: int, n: int) -> list[str]:
    sim = Simulator(Config(base_url="http://127.0.0.1:1", token="idem_x", seed=seed, stripe_secret="s", shopify_secret="s",
                           receiver_port=0), write=lambda line: None)
    try:
        return [sim._deal() for _ in range(n)]
    finally:
        sim.receiver.server.server_close()


def test_a_seed_deals_the_same_traffic_and_every_round_has_the_demos_breakages():
    rounds = 3 * sum(simulator.DECK.values())
    first = _dealt(11, rounds)
    assert first == _dealt(11, rounds)
    assert first != _dealt(12, rounds)
    for kind in ("agent_stall", "shopify_refund", "outbox_invoice", "unprotected_refund", "agent_new_key"):
        assert first.count(kind) == 3 * simulator.DECK[kind], kind
