"""The OpenTelemetry SDK for tests: one tracer provider per process (the API lets a process
set it once), whose span processor a test points where it wants, by default at an
InMemorySpanExporter it reads back; and a stand-in OTLP/HTTP collector that decodes what it is sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult


class _Switch(SpanProcessor):
    """Hands every span to `target`, or to nobody when it is None (the other tests')."""

    def __init__(self) -> None:
        self.target: SpanProcessor | None = None

    def on_start(self, span, parent_context=None) -> None:
        if self.target is not None:
            self.target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self.target is not None:
            self.target.on_end(span)


class _WhenSwitched(Sampler):
    """Records spans only while a test has pointed the switch somewhere: outside that, spans
    are as without an SDK (not recording), so no other test's requests carry a traceparent."""

    def __init__(self, switch: _Switch) -> None:
        self.switch = switch

    def should_sample(self, parent_context, trace_id, name, kind=None, attributes=None, links=None, trace_state=None):
        decision = Decision.RECORD_AND_SAMPLE if self.switch.target is not None else Decision.DROP
        return SamplingResult(decision, attributes)

    def get_description(self) -> str:
        return "WhenSwitched"


_switch: _Switch | None = None


def _installed() -> _Switch:
    global _switch
    if _switch is None:
        _switch = _Switch()
        provider = TracerProvider(sampler=_WhenSwitched(_switch))
        provider.add_span_processor(_switch)
        trace.set_tracer_provider(provider)
    return _switch


@contextmanager
def processing_spans(processor: SpanProcessor) -> Iterator[None]:
    """This process's spans go to `processor` inside the block."""
    switch = _installed()
    switch.target = processor
    try:
        yield
    finally:
        switch.target = None
        processor.shutdown()


@contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """The spans ended inside the block, read back with `.get_finished_spans()`."""
    exporter = InMemorySpanExporter()
    with processing_spans(SimpleSpanProcessor(exporter)):
        yield exporter


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


@contextmanager
def otlp_collector(port: int) -> Iterator[list]:
    """A stand-in OTLP/HTTP collector on `port`: every span it is sent, decoded."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = ExportTraceServiceRequest()
            request.ParseFromString(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            for resource_spans in request.resource_spans:
                service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
                received.extend((service, span) for scope in resource_spans.scope_spans for span in scope.spans)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
