"""OpenTelemetry spans, and the W3C trace context carried across the worker's queue.

Instrumented through opentelemetry-api only: with no SDK configured its tracer makes
non-recording spans, and without the API installed (`pip install idemdash` without the
`otel` extra) `span` is a `nullcontext` and `carrier` an empty dict, so idemdash runs
unchanged. The SDK and the OTLP exporters (the `otel` extra) are set up by `configure`,
which the dashboard app calls at start-up when IDEMDASH_OTEL is on, or by the host itself.

Attributes are named `idemdash.*` (docs/operations.md, "OpenTelemetry"); a key is never an
attribute, only its digest, and no body, header or secret is."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import ProxyTracerProvider, SpanKind
except ImportError:  # the API is not installed: every function below does nothing
    trace = None

# The tracer of every idemdash span (a proxy until a provider is set, then the provider's).
TRACER_NAME = "idemdash"

if trace is not None:
    _tracer = trace.get_tracer(TRACER_NAME)
    INTERNAL, SERVER, CLIENT, PRODUCER, CONSUMER = (
        SpanKind.INTERNAL, SpanKind.SERVER, SpanKind.CLIENT, SpanKind.PRODUCER, SpanKind.CONSUMER,
    )
else:
    INTERNAL = SERVER = CLIENT = PRODUCER = CONSUMER = None


class _NoSpan:
    """What `span` yields without the API: takes attributes and drops them."""

    def set_attribute(self, key: str, value: Any) -> None:
        pass

    def is_recording(self) -> bool:
        return False


_NO_SPAN = _NoSpan()
_NO_SPAN_CONTEXT = contextlib.nullcontext(_NO_SPAN)


def span(name: str, attributes: Mapping[str, Any] | None = None, *, kind: Any = None,
         parent: Mapping[str, str] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A span around the block, current within it; an exception leaving the block is recorded
    on it and sets its status to error. `parent` is a carrier (`carrier()`'s dict, a task's
    `traceparent`) whose trace the span continues: the context crossed a process boundary."""
    # No SDK set up (the API's proxy provider): its spans would record nothing, and skipping
    # them keeps a hot path's cost at a type check instead of a context attached and detached.
    if trace is None or isinstance(trace.get_tracer_provider(), ProxyTracerProvider):
        return _NO_SPAN_CONTEXT
    context = propagate.extract(parent) if parent else None
    return _tracer.start_as_current_span(name, context=context, kind=kind or INTERNAL, attributes=attributes)


def current() -> Any:
    """The current span (a non-recording one when there is none), to add attributes to."""
    return trace.get_current_span() if trace is not None else _NO_SPAN


def carrier() -> dict[str, str]:
    """The current trace context as W3C headers (`traceparent`, `tracestate`), for a task's
    kwargs or an outbound request; empty when no span is recording, so an untraced process
    adds nothing to what it enqueues or sends."""
    if trace is None or not trace.get_current_span().is_recording():
        return {}
    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


def task_kwargs() -> dict[str, str]:
    """`carrier()` as the keyword a django-q2 task takes (`traceparent=`), or none."""
    return traceparent_kwargs(carrier().get("traceparent"))


def traceparent_kwargs(traceparent: str | None) -> dict[str, str]:
    """A `traceparent` already taken (a task's argument, one kept on a row) as that keyword:
    none when it is empty, so an untraced task is enqueued without it."""
    return {"traceparent": traceparent} if traceparent else {}


@contextlib.contextmanager
def task(name: str, traceparent: str | None, attributes: Mapping[str, Any] | None = None) -> Iterator[Any]:
    """A worker's task span, continuing the trace of whoever enqueued it (`traceparent`)."""
    with span(name, attributes, kind=CONSUMER, parent={"traceparent": traceparent} if traceparent else None) as s:
        yield s


def configure(*, service_name: str = "idemdash", metrics: bool = False) -> bool:
    """Set the process's tracer (and, with `metrics`, meter) provider to the SDK's, exporting by
    OTLP over HTTP with a batch processor: spans are queued and sent from a thread of their
    own, so a collector that is down or slow costs a request nothing (the queue is bounded;
    what overflows is dropped). The exporter reads the OTEL_EXPORTER_OTLP_* variables
    (endpoint, headers, timeout); the service is named by OTEL_SERVICE_NAME, else `service_name`.
    False when the SDK or exporter is not installed."""
    try:
        from opentelemetry import metrics as otel_metrics
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return False
    # OTEL_SERVICE_NAME (read by Resource.create) wins over the default name.
    resource = Resource.create({} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": service_name})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    if metrics:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
        otel_metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=[reader]))
    return True


def sdk_installed() -> bool:
    """Whether `configure` can work: the SDK and the OTLP/HTTP exporter import."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True
