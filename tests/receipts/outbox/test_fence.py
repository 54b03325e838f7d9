from __future__ import annotations

import ipaddress
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpcore
import httpx
import pytest
import trustme
from django.test import override_settings
from hypothesis import given, strategies as st

from receipts.outbox import fence, store
from receipts.outbox.actions import ActionContext, PermanentError, RetryableError, http_post
from receipts.outbox.drain import drain
from receipts.outbox.models import OutboxAttempt, OutboxMessage

from .receiver import running_receiver

CTX = ActionContext(key="order-42", scope="", attempt=1, timeout=2)
PUBLIC = "93.184.215.14"  # never connected to: the socket layer below is a spy in these tests


@pytest.fixture
def connects(monkeypatch) -> list[tuple[str, int]]:
    """Every address the fenced backend hands to the socket layer. 127.0.0.1 gets a real
    socket; any other address fails as refused, so that no test leaves the machine."""
    seen: list[tuple[str, int]] = []
    real = httpcore.SyncBackend.connect_tcp

    def spy(self, host: str, port: int, *args, **kwargs):
        seen.append((host, port))
        if host == "127.0.0.1":
            return real(self, host, port, *args, **kwargs)
        raise httpcore.ConnectError("[Errno 111] Connection refused")

    monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", spy)
    return seen


def resolving_to(monkeypatch, *answers: list[str]) -> list[str]:
    """Make the fence's resolver answer each call with the next list of addresses (the
    last one repeats), and return the hosts it was asked about."""
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[fence.IPAddress]:
        asked.append(host)
        return [ipaddress.ip_address(a) for a in answers[min(len(asked), len(answers)) - 1]]

    monkeypatch.setattr(fence, "resolve", resolve)
    return asked


REFUSED = {
    "loopback": "127.0.0.1",
    "loopback elsewhere in 127/8": "127.8.9.10",
    "loopback v6": "[::1]",
    "private 10/8": "10.1.2.3",
    "private 172.16/12": "172.16.5.4",
    "private 192.168/16": "192.168.1.1",
    "unique local v6": "[fd12:3456::1]",
    "shared (CGNAT)": "100.64.0.1",
    "link-local": "169.254.1.1",
    "link-local v6": "[fe80::1]",
    "multicast": "224.0.0.251",
    "multicast v6": "[ff02::1]",
    "unspecified": "0.0.0.0",
    "unspecified v6": "[::]",
    "reserved": "240.0.0.1",
    "broadcast": "255.255.255.255",
    "documentation": "192.0.2.10",
    "documentation v6": "[2001:db8::1]",
    "metadata (AWS, GCP, Azure)": "169.254.169.254",
    "metadata v6 (AWS)": "[fd00:ec2::254]",
    "metadata (Alibaba)": "100.100.100.200",
    "IPv4-mapped loopback": "[::ffff:127.0.0.1]",
    "IPv4-mapped metadata": "[::ffff:169.254.169.254]",
    "6to4 of loopback": "[2002:7f00:1::1]",
    "NAT64 of a private address": "[64:ff9b::a00:1]",
    "loopback written as one number": "2130706433",
    "a name that resolves to loopback": "localhost",
}


@pytest.mark.parametrize("host", REFUSED.values(), ids=REFUSED.keys())
def test_without_a_list_a_non_public_address_is_refused_before_any_connection(settings, connects, host):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = []
    with pytest.raises(PermanentError) as refused:
        http_post({"url": f"http://{host}:8080/hook"}, CTX)
    assert str(refused.value) == fence.BLOCKED_MESSAGE
    assert connects == []


@pytest.mark.django_db
def test_a_refusal_reads_the_same_for_an_open_and_a_closed_port_and_is_dead_at_once(settings, connects):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = []
    with running_receiver() as receiver:
        port = int(receiver.url.rsplit(":", 1)[1].split("/")[0])
        store.enqueue("http.post", {"url": f"http://localhost:{port}/hook"}, "open")
        store.enqueue("http.post", {"url": "http://localhost:9/hook"}, "closed")
        report = drain()
    assert (report.dead, report.retried) == (2, 0)
    assert not receiver.requests and connects == []
    errors = {a.message.key: a.error for a in OutboxAttempt.objects.select_related("message")}
    assert errors == {"open": fence.BLOCKED_MESSAGE, "closed": fence.BLOCKED_MESSAGE}
    assert set(OutboxMessage.objects.values_list("status", flat=True)) == {"dead"}
    assert str(port) not in fence.BLOCKED_MESSAGE and "127.0.0.1" not in fence.BLOCKED_MESSAGE


def test_a_listed_host_may_be_loopback(settings, connects):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["127.0.0.1"]
    with running_receiver() as receiver:
        assert http_post({"url": receiver.url, "json": {"a": 1}}, CTX) == 200
    assert receiver.requests["order-42"] == 1


def test_a_listed_name_is_posted_to_at_the_checked_address_with_its_own_host_header(settings, monkeypatch, connects):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["partner.internal"]
    asked = resolving_to(monkeypatch, ["127.0.0.1"])
    with running_receiver() as receiver:
        port = int(receiver.url.rsplit(":", 1)[1].split("/")[0])
        assert http_post({"url": f"http://partner.internal:{port}/hook"}, CTX) == 200
    assert asked == ["partner.internal"] and connects == [("127.0.0.1", port)]
    assert receiver.headers[0]["Host"] == f"partner.internal:{port}"


def test_a_listed_name_still_never_reaches_a_metadata_service(settings, monkeypatch, connects):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["partner.internal"]
    resolving_to(monkeypatch, ["169.254.169.254"])
    with pytest.raises(PermanentError, match="Blocked by policy"):
        http_post({"url": "http://partner.internal/hook"}, CTX)
    assert connects == []


def test_a_name_with_one_private_address_among_public_ones_is_refused(settings, monkeypatch, connects):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = []
    resolving_to(monkeypatch, [PUBLIC, "10.0.0.7"])
    with pytest.raises(PermanentError, match="Blocked by policy"):
        http_post({"url": "https://partner.example/hook"}, CTX)
    assert connects == []


def test_dns_rebinding_gets_nowhere_the_socket_goes_to_the_address_that_was_checked(settings, monkeypatch, connects):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = []
    # Public for the first lookup, loopback for every later one: a second lookup at
    # connect time would reach 127.0.0.1.
    asked = resolving_to(monkeypatch, [PUBLIC], ["127.0.0.1"])
    with pytest.raises(RetryableError) as failed:  # the spy refuses the public address
        http_post({"url": "http://rebind.example:8080/hook"}, CTX)
    assert asked == ["rebind.example"] and connects == [(PUBLIC, 8080)]
    assert str(failed.value) == "ConnectError: [Errno 111] Connection refused"  # no more than before the fence
    with pytest.raises(PermanentError, match="Blocked by policy"):  # the next attempt's lookup says loopback
        http_post({"url": "http://rebind.example:8080/hook"}, CTX)
    assert connects == [(PUBLIC, 8080)]


def test_a_name_that_does_not_resolve_is_retried_as_before(settings):
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = []
    with pytest.raises(RetryableError, match="^ConnectError: "):
        http_post({"url": "http://no-such-host.invalid/hook"}, CTX)


def test_the_transport_takes_no_proxy():
    with pytest.raises(ValueError, match="no proxy"):
        fence.FencedTransport(proxy="http://127.0.0.1:3128")


# --- the address rule -----------------------------------------------------------------------


@given(st.ip_addresses(v=4))
def test_an_ipv6_address_carrying_an_ipv4_one_is_judged_by_it(v4):
    verdict = fence.is_public(v4)
    mapped = ipaddress.IPv6Address(f"::ffff:{v4}")
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80) | 1)
    nat64 = ipaddress.IPv6Address(int(ipaddress.IPv6Address("64:ff9b::")) | int(v4))
    assert fence.is_public(mapped) == fence.is_public(sixtofour) == fence.is_public(nat64) == verdict


@given(st.ip_addresses())
def test_a_public_address_is_global_unicast_by_every_measure(address):
    if fence.is_public(address) and fence._embedded_ipv4(address) is None:
        assert address.is_global and not (address.is_multicast or address.is_private or address.is_reserved)
        assert not (address.is_loopback or address.is_link_local or address.is_unspecified)


REFUSED_NETWORKS = [*fence._REFUSED_V4, *fence._REFUSED_V6, ipaddress.IPv6Network("fc00::/7"),
                    ipaddress.IPv6Network("fe80::/10"), ipaddress.IPv6Network("ff00::/8"),
                    ipaddress.IPv6Network("::/8"), ipaddress.IPv6Network("fec0::/10")]


@given(st.sampled_from(REFUSED_NETWORKS).flatmap(lambda network: st.ip_addresses(network=network)))
def test_no_address_in_a_special_purpose_block_is_public(address):
    assert not fence.is_public(address)


@given(st.lists(st.ip_addresses(), min_size=1, max_size=5))
@override_settings(OUTBOX_HTTP_ALLOWED_HOSTS=[])
def test_a_host_passes_only_if_every_address_it_resolves_to_is_public(addresses):
    if all(fence.is_public(a) for a in addresses):
        fence.check("partner.example", addresses)
    else:
        with pytest.raises(fence.Blocked):
            fence.check("partner.example", addresses)


# --- TLS to a pinned address ------------------------------------------------------------------


@pytest.fixture
def tls_receiver():
    """An HTTPS server on 127.0.0.1 whose certificate names partner.internal only; yields
    its port, the client-side SSL context that trusts its CA, and the SNI names it saw."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("partner.internal").configure_cert(server_context)
    names: list[str | None] = []
    server_context.sni_callback = lambda sock, name, ctx: names.append(name)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    try:
        yield server.server_address[1], client_context, names
    finally:
        server.shutdown()
        server.server_close()


def test_https_to_a_pinned_address_sends_sni_and_verifies_the_certificate_for_the_urls_name(
    settings, monkeypatch, tls_receiver
):
    port, trust, names = tls_receiver
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["partner.internal", "impostor.internal"]
    resolving_to(monkeypatch, ["127.0.0.1"])
    with httpx.Client(transport=fence.FencedTransport(verify=trust), timeout=5) as client:
        assert client.post(f"https://partner.internal:{port}/hook", json={}).status_code == 200
        assert names == ["partner.internal"]
        # The same address under a name the certificate does not carry: verification fails.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            client.post(f"https://impostor.internal:{port}/hook", json={})
