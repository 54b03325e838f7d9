"""A tracing backend that is down never slows or fails a protected request: spans go to the
OTLP/HTTP exporter through a BatchSpanProcessor (what `idemdash.core.tracing.configure`
sets up), and the collector is up, then stopped (its port refuses), then blackholed (it
accepts connections and never answers, so every export waits out its timeout). Requests
to an `@idempotent` view go on all along, through Django's test client, and are timed."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.otel import otlp_collector, processing_spans
from tests.receipts.test_decorators import post

pytestmark = [pytest.mark.urls("tests.receipts.urls"), pytest.mark.django_db]

# The task's own ports (docs: 18100-18199): the collector's, and the blackhole's.
COLLECTOR_PORT = 18100
BLACKHOLE_PORT = 18101
EXPORT_TIMEOUT = 5.0  # seconds the exporter waits for an answer before it gives a batch up
REQUESTS = 60
# No request waits for the exporter: one that did would take at least EXPORT_TIMEOUT. The bound
# keeps a margin below it and far above a request's time, for a busy machine's stalls (a
# 1.56 s request, median 12 ms, failed a bound of 1 s in CI while tests ran beside it).
# What a span costs a request is a benchmark's question, not a timed assertion's: a median
# within 20 ms of the untraced one, asserted here before, failed under a loaded CI machine
# while no request came near this bound.
WORST_SECONDS = EXPORT_TIMEOUT - 1.0


@contextmanager
def blackhole() -> Iterator[list[socket.socket]]:
    """A port that accepts connections and reads what comes, never answering."""
    listener = socket.create_server(("127.0.0.1", BLACKHOLE_PORT))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def swallow() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(conn)

    thread = threading.Thread(target=swallow, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def timed_requests(client, prefix: str) -> list[float]:
    took = []
    for n in range(REQUESTS):
        started = time.perf_counter()
        response = post(client, "/capture", key=f"{prefix}-{n}")
        took.append(time.perf_counter() - started)
        assert response.status_code == 201, response.content
    return took


def processor(port: int) -> BatchSpanProcessor:
    # A short delay and a small queue: batches go out while the requests run, and the
    # queue overflows (spans dropped, never waited for) while the collector is away.
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=EXPORT_TIMEOUT)
    return BatchSpanProcessor(exporter, schedule_delay_millis=50, max_queue_size=32, max_export_batch_size=16)


def test_requests_are_neither_slowed_nor_failed_while_the_collector_is_up_stopped_or_blackholed(client):
    untraced = timed_requests(client, "untraced")
    with otlp_collector(COLLECTOR_PORT) as received, processing_spans(processor(COLLECTOR_PORT)):
        up = timed_requests(client, "up")
        deadline = time.monotonic() + 5
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
    assert {span.name for _, span in received} >= {"idemdash.receipt.claim", "idemdash.receipt.settle"}

    # Stopped: the collector's port refuses every connection.
    with processing_spans(processor(COLLECTOR_PORT)):
        stopped = timed_requests(client, "stopped")

    # Blackholed: connections hang until the exporter's timeout.
    with blackhole() as accepted, processing_spans(processor(BLACKHOLE_PORT)):
        hung = timed_requests(client, "hung")
        assert accepted, "the exporter never reached the blackhole"

    for phase, took in {"untraced": untraced, "up": up, "stopped": stopped, "blackholed": hung}.items():
        assert max(took) < WORST_SECONDS, (phase, max(took), statistics.median(took))
