"""The fence around http.post: which addresses the workers may connect to (docs/outbox.md,
"Where it may post").

An API client chooses http.post's URL. Unfenced, any token holder could make the workers
post to the machine itself, to the private network or to a cloud metadata service, and read
the recorded error to tell an open port from a closed one. So an unlisted host may be reached
only at public addresses, a host in OUTBOX_HTTP_ALLOWED_HOSTS at any but a metadata address
(`check`), and the check is on the address the socket connects to (`FencedBackend`). A
refusal raises Blocked before any connection, naming the policy and nothing about the address."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

import httpcore
import httpx

from receipts.outbox.conf import setting

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

BLOCKED_MESSAGE = "Blocked by policy: http.post may not connect to this host (see OUTBOX_HTTP_ALLOWED_HOSTS)."

# IANA's special-purpose registries, written out rather than taken from ipaddress's
# is_private/is_global, whose lists change between Python releases (3.11.7 calls
# 192.0.0.192 and every multicast address global). Those checks are applied as well.
_REFUSED_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
    )
)
# Only global unicast (2000::/3) can be public; inside it, these are not.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
_REFUSED_V6 = tuple(ipaddress.IPv6Network(n) for n in ("2001::/23", "2001:db8::/32", "3fff::/20"))
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, OpenStack
        "169.254.170.2",  # AWS ECS task credentials
        "169.254.170.23",  # AWS EKS pod identity
        "fd00:ec2::254",  # AWS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud (classic)
    )
)


class Blocked(ValueError):
    """The policy refuses the target. A ValueError, so the validator refuses it at enqueue."""

    def __init__(self) -> None:
        super().__init__(BLOCKED_MESSAGE)


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def is_public(address: IPAddress) -> bool:
    """May an unlisted host's name resolve to this address?"""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return is_public(embedded)
    if address in METADATA_ADDRESSES:
        return False
    if isinstance(address, ipaddress.IPv4Address):
        special = any(address in network for network in _REFUSED_V4)
    else:
        special = address not in _GLOBAL_UNICAST or any(address in network for network in _REFUSED_V6)
    return not special and address.is_global and not (address.is_multicast or address.is_reserved)


def is_metadata(address: IPAddress) -> bool:
    return (_embedded_ipv4(address) or address) in METADATA_ADDRESSES


def allowed_hosts() -> frozenset[str]:
    return frozenset(host.lower() for host in setting("OUTBOX_HTTP_ALLOWED_HOSTS"))


def check(host: str, addresses: Iterable[IPAddress]) -> None:
    """Raise Blocked unless `host` may be reached at every one of `addresses`: one refused
    address refuses the host.

    With OUTBOX_HTTP_ALLOWED_HOSTS empty, any host, at public addresses only (`is_public`:
    an IPv6 address that carries an IPv4 one is judged by that IPv4). With a list, only the
    hosts listed (http.post's validator), at any address: an operator who lists `127.0.0.1`
    or an internal name means it. Cloud metadata addresses are refused even for a listed
    host: nothing posts JSON there, and a listed name whose DNS is subverted must not reach
    the instance's credentials."""
    listed = host.lower() in allowed_hosts()
    for address in addresses:
        if is_metadata(address) or not (listed or is_public(address)):
            raise Blocked()


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to, in the resolver's order, each once."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0].partition("%")[0]) for info in infos))


class FencedBackend(httpcore.NetworkBackend):
    """httpcore's network backend with the fence in connect_tcp: resolve, check, connect to
    a checked address, never to a second resolution's, so a name that resolves to a public
    address for the check and to a private one for the connection (DNS rebinding) gets
    nowhere. The URL is unchanged, so the Host header, TLS SNI and certificate verification
    still use its host name; only the socket's address is pinned."""

    def __init__(self) -> None:
        self._sockets = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = resolve(host, port)
        except OSError as exc:  # the same ConnectError (and text) that httpcore's own lookup gives
            raise httpcore.ConnectError(exc) from exc
        check(host, addresses)
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for address in addresses:  # like socket.create_connection: the first that answers
            try:
                return self._sockets.connect_tcp(str(address), port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host!r} resolved to no address")

    def connect_unix_socket(self, *args: object, **kwargs: object) -> httpcore.NetworkStream:
        raise Blocked()

    def sleep(self, seconds: float) -> None:
        self._sockets.sleep(seconds)


class FencedTransport(httpx.HTTPTransport):
    """httpx's transport with a FencedBackend under its connection pool. Never give it a
    proxy: the fence would then judge the proxy's address, not the target's."""

    def __init__(self, **kwargs: object) -> None:
        if kwargs.get("proxy") or kwargs.get("uds"):
            raise ValueError("A fenced transport connects directly: no proxy, no Unix socket.")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        # httpx has no parameter for httpcore's network backend. The pool hands its
        # backend to each connection it opens, so replacing it before the first request
        # puts every connection behind the fence.
        assert isinstance(self._pool, httpcore.ConnectionPool)
        self._pool._network_backend = FencedBackend()
