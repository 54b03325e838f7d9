"""A tracing backend that is down never fails or holds up a protected request: spans go to the
OTLP/HTTP exporter through a BatchSpanProcessor (what `idemdash.core.tracing.configure`
sets up), and the collector is up, then stopped (its port refuses), then blackholed (it
accepts connections and never answers). Requests to an `@idempotent` view go on all along,
through Django's test client. That none waits for an export is shown by the order of events,
not by timing requests: all of them complete while an export to the blackhole is still hanging."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.otel import otlp_collector, processing_spans
from tests.receipts.test_decorators import post
from tests.waits import until

pytestmark = [pytest.mark.urls("tests.receipts.urls"), pytest.mark.django_db]

# The task's own ports (docs: 18100-18199): the collector's, and the blackhole's.
COLLECTOR_PORT = 18100
BLACKHOLE_PORT = 18101
REQUESTS = 60


class Blackhole:
    """A port that accepts connections and reads what comes, never answering, until `release`
    closes what it accepted (so an export hanging on it ends at once, not at its timeout)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", BLACKHOLE_PORT))
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._swallow, daemon=True)
        self._thread.start()

    def _swallow(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)

    def release(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        for conn in self.accepted:
            conn.close()
        self.listener.close()


class CountingExporter(OTLPSpanExporter):
    """The real exporter, counting the exports that have begun and the ones that returned."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.begun = self.returned = 0

    def export(self, spans):
        self.begun += 1
        try:
            return super().export(spans)
        finally:
            self.returned += 1


@contextmanager
def exporting_to(port: int, timeout: float) -> Iterator[CountingExporter]:
    # A short delay and a small queue: batches go out while the requests run, and the
    # queue overflows (spans dropped, never waited for) while the collector is away.
    exporter = CountingExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=timeout)
    processor = BatchSpanProcessor(exporter, schedule_delay_millis=50, max_queue_size=32, max_export_batch_size=16)
    with processing_spans(processor):
        yield exporter


def requests(client, prefix: str) -> None:
    for n in range(REQUESTS):
        response = post(client, "/capture", key=f"{prefix}-{n}")
        assert response.status_code == 201, response.content


def test_requests_are_neither_failed_nor_held_up_while_the_collector_is_up_stopped_or_blackholed(client):
    with otlp_collector(COLLECTOR_PORT) as received, exporting_to(COLLECTOR_PORT, timeout=5):
        requests(client, "up")
        until(lambda: received, "the collector received no span")
    assert {span.name for _, span in received} >= {"idemdash.receipt.claim", "idemdash.receipt.settle"}

    # Stopped: the collector's port refuses every connection; every request still succeeds.
    with exporting_to(COLLECTOR_PORT, timeout=0.5) as exporter:
        requests(client, "stopped")
        until(lambda: exporter.begun, "no export was tried")

    # Blackholed: an export hangs for as long as the test keeps the blackhole (its timeout is
    # far beyond the test's). The requests are sent only once one hangs there, and all of them
    # complete before it returns: none waited for it.
    blackhole = Blackhole()
    try:
        with exporting_to(BLACKHOLE_PORT, timeout=600) as exporter:
            post(client, "/capture", key="hung-first")
            until(lambda: blackhole.accepted and exporter.begun, "the exporter never reached the blackhole")
            requests(client, "hung")
            assert exporter.returned == 0, "an export to the blackhole returned while it never answers"
            # The export ends now, not at its timeout nor at the processor's shutdown's (30 s).
            blackhole.release()
            exporter.shutdown()
    finally:
        blackhole.release()
