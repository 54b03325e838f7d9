"""A local HTTP receiver for outbox tests: counts requests per Idempotency-Key and notices
two requests for one key being handled at the same time (a concurrent double send)."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# policy(key, nth request for that key, parsed body) -> (status, headers, seconds to hold)
Policy = Callable[[str, int, object], tuple[int, dict[str, str], float]]


def always_ok(key: str, nth: int, body: object) -> tuple[int, dict[str, str], float]:
    return 200, {}, 0.0


@dataclass
class Receiver:
    policy: Policy = always_ok
    url: str = ""
    requests: Counter = field(default_factory=Counter)
    successes: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    keys_by_body: dict = field(default_factory=lambda: defaultdict(set))
    headers: list = field(default_factory=list)
    overlaps: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    _in_flight: Counter = field(default_factory=Counter)


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    import time

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            raw = self.rfile.read(length)
            body = json.loads(raw) if raw else None
            key = self.headers.get("Idempotency-Key", "")
            with receiver.lock:
                receiver.requests[key] += 1
                nth = receiver.requests[key]
                receiver._in_flight[key] += 1
                if receiver._in_flight[key] > 1:
                    receiver.overlaps += 1
                receiver.keys_by_body[json.dumps(body, sort_keys=True)].add(key)
                receiver.headers.append(dict(self.headers))
            status, headers, hold = receiver.policy(key, nth, body)
            if hold:
                time.sleep(hold)
            # The request stops counting as in flight before its response leaves, so a
            # retry that follows a response can never be mistaken for an overlap.
            with receiver.lock:
                receiver._in_flight[key] -= 1
                receiver.statuses[status] += 1
                if 200 <= status < 300:
                    receiver.successes[key] += 1
            payload = b'{"ok": true}' if status < 300 else b'{"error": "try later"}'
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except OSError:
                pass  # the client gave up (a killed drainer)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def running_receiver(policy: Policy = always_ok) -> Iterator[Receiver]:
    receiver = Receiver(policy=policy)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
