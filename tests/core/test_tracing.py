"""OpenTelemetry spans (idemdash/core/tracing.py), read back from the SDK's in-memory exporter:
one span for each of claim, replay, settle, webhook receive and process, outbox send and an
operator's action, with the attributes docs/operations.md lists and never a raw key; and
the trace context carried from a request into the worker's task (the task as the broker
stores it, run on another thread; kept on the webhook event and the outbox message for a
later task or drain) and onto the outbox's outbound HTTP (`traceparent`)."""

from __future__ import annotations

import importlib
import json
import threading

import pytest
from django.db import connection, connections
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from opentelemetry import trace
from opentelemetry.trace import format_span_id, format_trace_id

from idemdash.core import tracing
from receipts import run_once, store, waiting
from receipts.models import Receipt
from receipts.outbox import drain
from receipts.outbox import store as outbox_store
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import failed
from tests.otel import named, otlp_collector, recorded_spans
from tests.qcluster import start_qcluster, stop_process
from tests.receipts.test_decorators import post
from tests.receipts.outbox.receiver import running_receiver
from tests.waits import until
from tests.webhooks.conftest import deliver_stripe, make_endpoint, stripe_event
from webhooks import processing
from webhooks.models import WebhookEvent

KEY = "order-4711-secret-ish"
COLLECTOR_PORT = 18102  # this work's ports are 18100-18199


def attribute_values(exporter) -> list[str]:
    return [str(value) for span in exporter.get_finished_spans() for value in span.attributes.values()]


@pytest.fixture
def spans():
    with recorded_spans() as exporter:
        yield exporter


@pytest.mark.django_db
def test_a_claim_and_its_settle_are_spans_that_name_the_key_by_its_digest(spans):
    result = store.claim("tenant-1", KEY, "payment.capture", {"amount": 5})
    store.complete(store.Held("tenant-1", KEY, result.token), body="{}")
    (claim,) = named(spans, "idemdash.receipt.claim")
    assert dict(claim.attributes) == {
        "idemdash.operation": "payment.capture",
        "idemdash.key.digest": waiting.topic("tenant-1", KEY),
        "idemdash.claim.outcome": "claimed",
        "idemdash.receipt.id": result.receipt.pk,
        "idemdash.fencing_token": 1,
    }
    (settle,) = named(spans, "idemdash.receipt.settle")
    assert dict(settle.attributes) == {
        "idemdash.key.digest": waiting.topic("tenant-1", KEY), "idemdash.settle.outcome": "completed",
        "idemdash.fencing_token": 1, "idemdash.settle.stale": False,
    }
    assert not any(KEY in value or "tenant-1" in value for value in attribute_values(spans))


@pytest.mark.django_db
def test_a_replay_is_the_claim_span_named_as_a_replay(spans):
    result = store.claim("", KEY, "payment.capture")
    store.complete(store.Held("", KEY, result.token), body="{}")
    store.claim("", KEY, "payment.capture")
    (replay,) = named(spans, "idemdash.receipt.replay")
    assert replay.attributes["idemdash.claim.outcome"] == "replayed"
    assert len(named(spans, "idemdash.receipt.claim")) == 1


@pytest.mark.django_db
def test_the_in_process_api_and_a_stale_settle_are_traced_too(spans):
    assert run_once(KEY, "email.send", lambda: {"ok": 1}) == {"ok": 1}
    assert [s.name for s in spans.get_finished_spans()] == ["idemdash.receipt.claim", "idemdash.receipt.settle"]
    claim = store.claim("", "other", "email.send")
    store.release(claim.receipt, actor="test")
    with pytest.raises(store.StaleToken):
        store.complete(store.Held("", "other", claim.token), body="{}")
    assert named(spans, "idemdash.receipt.settle")[-1].attributes["idemdash.settle.stale"] is True


@pytest.mark.urls("tests.receipts.urls")
@pytest.mark.django_db
def test_an_idempotent_view_is_traced_as_a_claim_a_settle_and_then_a_replay(client, spans):
    first, again = post(client, "/capture"), post(client, "/capture")
    assert first.status_code == again.status_code == 201 and again["Idempotent-Replayed"] == "true"
    assert [s.name for s in spans.get_finished_spans()] == [
        "idemdash.receipt.claim", "idemdash.receipt.settle", "idemdash.receipt.replay"]


def _tasks() -> list[dict]:
    return [SignedPackage.loads(row.payload) for row in OrmQ.objects.order_by("id")]


def run_on_another_thread(task: dict):
    """Run a task as a worker does: its function from the package's dotted path, with the
    package's arguments, on a thread that inherits no context of this one."""
    module, _, name = task["func"].rpartition(".")
    outcome = []

    def run_task() -> None:
        try:
            outcome.append(getattr(importlib.import_module(module), name)(*task["args"], **task["kwargs"]))
        finally:
            connections.close_all()

    worker = threading.Thread(target=run_task)
    worker.start()
    worker.join(30)
    (result,) = outcome
    return result


@pytest.mark.django_db(transaction=True)
def test_a_delivery_carries_its_trace_into_the_worker_task_that_processes_it(client, spans):
    make_endpoint("stripe", "stripe", "whsec_tracing_0000000000000")
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("incoming request") as request_span:
        response = deliver_stripe(client, "stripe", stripe_event({"id": "pi_t1", "object": "payment_intent"},
                                                                  "payment_intent.succeeded"),
                                  secret="whsec_tracing_0000000000000")
    assert response.status_code == 200
    (receive,) = named(spans, "idemdash.webhook.receive")
    event = WebhookEvent.objects.get()
    assert dict(receive.attributes) == {
        "idemdash.webhook.provider": "stripe", "idemdash.webhook.event_id": event.pk,
        "idemdash.webhook.duplicate": False, "http.response.status_code": 200,
    }
    assert receive.parent.span_id == request_span.get_span_context().span_id
    # The task as the ORM broker stores it (written with the event, in its commit).
    (task,) = _tasks()
    traceparent = task["kwargs"]["traceparent"]
    trace_id = format_trace_id(receive.context.trace_id)
    assert traceparent.split("-")[1:3] == [trace_id, format_span_id(receive.context.span_id)]

    outcome = run_on_another_thread(task)
    assert outcome in ("completed", "ignored")
    (process,) = named(spans, "idemdash.webhook.process")
    assert process.context.trace_id == receive.context.trace_id
    assert process.parent.span_id == receive.context.span_id and process.parent.is_remote
    assert process.kind == trace.SpanKind.CONSUMER
    assert process.attributes["idemdash.webhook.event_id"] == event.pk
    assert process.attributes["idemdash.webhook.outcome"] == outcome
    assert process.attributes["idemdash.webhook.provider"] == "stripe"


@pytest.mark.django_db(transaction=True)
def test_an_event_the_sweep_enqueues_again_is_processed_in_its_deliverys_trace(client, spans):
    """A retry after its backoff, a lost task, a stuck row recovered: the sweep enqueues the
    event again, and that task continues the trace of the delivery (kept on the event), not
    the sweep's nor one of its own."""
    make_endpoint("stripe", "stripe", "whsec_tracing_0000000000000")
    with trace.get_tracer("test").start_as_current_span("incoming request"):
        deliver_stripe(client, "stripe", stripe_event({"id": "pi_t3", "object": "payment_intent"},
                                                      "payment_intent.succeeded"), secret="whsec_tracing_0000000000000")
    (receive,) = named(spans, "idemdash.webhook.receive")
    event = WebhookEvent.objects.get()
    assert event.traceparent.split("-")[1:3] == [format_trace_id(receive.context.trace_id),
                                                 format_span_id(receive.context.span_id)]
    OrmQ.objects.all().delete()  # its task lost: pulled by a cluster that died
    WebhookEvent.objects.filter(pk=event.pk).update(enqueued_at=None)

    with trace.get_tracer("test").start_as_current_span("scheduled sweep"):
        assert processing.sweep().enqueued == 1
    (task,) = _tasks()
    assert task["kwargs"]["traceparent"] == event.traceparent
    assert run_on_another_thread(task) in ("completed", "ignored")
    (process,) = named(spans, "idemdash.webhook.process")
    assert process.context.trace_id == receive.context.trace_id
    assert process.parent.span_id == receive.context.span_id and process.parent.is_remote


def traced_qcluster(tmp_path, **env: str):
    """A real `manage.py qcluster` with IDEMDASH_OTEL, exporting by OTLP to the collector on
    COLLECTOR_PORT every 100 ms."""
    return start_qcluster(tmp_path / "qcluster.log", IDEMDASH_OTEL="true", OTEL_SERVICE_NAME="idemdash-test-worker",
                          OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{COLLECTOR_PORT}", OTEL_BSP_SCHEDULE_DELAY="100",
                          **env)


def until_exported(worker, received: list, names: set[str], within: float = 60) -> None:
    """Wait until the collector has a span of each name (or the worker exits, or time is up:
    the caller's assertions then say what is missing)."""
    try:
        until(lambda: worker.poll() is not None or names <= {span.name for _, span in received}, "the spans",
              within=within, every=0.25)
    except AssertionError:
        pass  # the caller's assertions say what is missing


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_real_qcluster_exports_its_task_span_in_the_deliverys_trace(client, spans, tmp_path):
    """IDEMDASH_OTEL in a real `manage.py qcluster` (tracing.configure, its forked workers):
    the worker's process span reaches the collector by OTLP, in the trace of the delivery."""
    secret = "whsec_tracing_0000000000000"
    make_endpoint("stripe", "stripe", secret)
    with otlp_collector(COLLECTOR_PORT) as received:
        worker = traced_qcluster(tmp_path)
        try:
            response = deliver_stripe(client, "stripe", stripe_event({"id": "pi_q1", "object": "payment_intent"},
                                                                      "payment_intent.succeeded"), secret=secret)
            assert response.status_code == 200
            until_exported(worker, received, {"idemdash.webhook.process"})
        finally:
            stop_process(worker)
            connection.close()
    (receive,) = named(spans, "idemdash.webhook.receive")
    processed = [(service, span) for service, span in received if span.name == "idemdash.webhook.process"]
    assert processed, (tmp_path / "qcluster.log").read_text()[-3000:]
    ((service, process),) = processed
    assert service == "idemdash-test-worker"
    assert process.trace_id.hex() == format_trace_id(receive.context.trace_id)
    assert process.parent_span_id.hex() == format_span_id(receive.context.span_id)
    outcome = {a.key: a.value.string_value for a in process.attributes}["idemdash.webhook.outcome"]
    assert outcome in ("completed", "ignored")


@pytest.mark.django_db(transaction=True)
def test_a_delivery_enqueues_no_trace_context_when_nothing_records(client):
    make_endpoint("stripe", "stripe", "whsec_tracing_0000000000000")
    deliver_stripe(client, "stripe", stripe_event({"id": "pi_t2", "object": "payment_intent"}, "payment_intent.succeeded"),
                   secret="whsec_tracing_0000000000000")
    (task,) = _tasks()
    assert "traceparent" not in task["kwargs"]
    assert tracing.carrier() == {} and tracing.task_kwargs() == {}
    assert WebhookEvent.objects.get().traceparent == ""
    OrmQ.objects.all().delete()
    WebhookEvent.objects.update(enqueued_at=None)
    assert processing.sweep().enqueued == 1
    (task,) = _tasks()
    assert "traceparent" not in task["kwargs"]


@pytest.mark.django_db
def test_an_outbox_send_is_a_span_whose_context_the_receiver_gets_as_traceparent(outbox_may_post_locally, spans):
    with running_receiver() as receiver:
        outbox_store.enqueue("http.post", {"url": receiver.url, "json": {"n": 1}}, KEY)
        report = drain.drain()
    assert report.sent == 1
    (send,) = named(spans, "idemdash.outbox.send")
    assert send.kind == trace.SpanKind.PRODUCER
    assert dict(send.attributes) == {
        "idemdash.outbox.message_id": send.attributes["idemdash.outbox.message_id"], "idemdash.outbox.action": "http.post",
        "idemdash.outbox.attempt": 1, "idemdash.fencing_token": send.attributes["idemdash.fencing_token"],
        "server.address": "127.0.0.1", "http.response.status_code": 200,
    }
    (headers,) = receiver.headers
    _, trace_id, parent_id, _ = headers["traceparent"].split("-")
    assert (trace_id, parent_id) == (format_trace_id(send.context.trace_id), format_span_id(send.context.span_id))
    assert not any(KEY in value for value in attribute_values(spans))


@pytest.mark.django_db(transaction=True)
def test_a_message_enqueued_under_a_request_is_sent_with_that_requests_trace(outbox_may_post_locally, spans):
    tracer = trace.get_tracer("test")
    with running_receiver() as receiver:
        with tracer.start_as_current_span("incoming request") as request_span:
            outbox_store.enqueue("http.post", {"url": receiver.url, "json": {"n": 1}}, KEY)
        # The send task (store.send_soon), as the broker stores it, run where no context is.
        (task,) = _tasks()
        assert task["func"] == "receipts.outbox.tasks.send"
        assert run_on_another_thread(task)["sent"] == 1
    request_trace = request_span.get_span_context().trace_id
    (send,) = named(spans, "idemdash.outbox.send")
    (send_task,) = named(spans, "idemdash.outbox.send_task")
    assert send_task.parent.span_id == request_span.get_span_context().span_id and send_task.parent.is_remote
    assert send.context.trace_id == request_trace and send.parent.span_id == send_task.context.span_id
    (headers,) = receiver.headers
    assert headers["traceparent"].split("-")[1:3] == [format_trace_id(request_trace), format_span_id(send.context.span_id)]


@pytest.mark.django_db
def test_a_message_the_scheduled_drain_sends_later_continues_its_enqueuers_trace(outbox_may_post_locally, spans):
    # No send task ran (a lost task, a retry after its backoff): the drain has only the row.
    tracer = trace.get_tracer("test")
    with running_receiver() as receiver:
        with tracer.start_as_current_span("incoming request") as request_span:
            message = outbox_store.enqueue("http.post", {"url": receiver.url, "json": {"n": 1}}, KEY).message
        assert drain.drain().sent == 1
    request = request_span.get_span_context()
    assert message.traceparent.split("-")[1:3] == [format_trace_id(request.trace_id), format_span_id(request.span_id)]
    (send,) = named(spans, "idemdash.outbox.send")
    assert send.context.trace_id == request.trace_id
    assert send.parent.span_id == request.span_id and send.parent.is_remote
    (headers,) = receiver.headers
    assert headers["traceparent"].split("-")[1:3] == [format_trace_id(request.trace_id), format_span_id(send.context.span_id)]


@pytest.mark.django_db
def test_an_outbox_send_sends_no_traceparent_when_nothing_records(outbox_may_post_locally):
    with running_receiver() as receiver:
        outbox_store.enqueue("http.post", {"url": receiver.url, "json": {}}, KEY)
        drain.drain()
    (headers,) = receiver.headers
    assert "traceparent" not in {name.lower() for name in headers}
    assert OutboxMessage.objects.get().traceparent == ""


@pytest.mark.django_db
def test_an_operators_action_from_the_dashboard_is_a_span(operator_client, spans):
    receipt = failed(KEY)
    response = operator_client.post(f"/receipts/{receipt.pk}/release/", {"reason": "card fixed, try again"})
    assert response.status_code in (200, 302)
    assert Receipt.objects.get(pk=receipt.pk).released_at is not None
    (action,) = named(spans, "idemdash.operator.action")
    assert dict(action.attributes) == {
        "idemdash.operator.action": "release", "idemdash.operator.unit": "receipts.Receipt",
        "idemdash.operator.unit_id": str(receipt.pk),
    }
    assert not any("card fixed" in value or KEY in value for value in attribute_values(spans))


def test_without_the_api_a_span_is_a_shared_no_op(monkeypatch):
    monkeypatch.setattr(tracing, "trace", None)
    with tracing.span("anything", {"a": 1}) as span:
        assert not span.is_recording()
    assert tracing.span("x") is tracing.span("y")
    assert tracing.carrier() == {} and tracing.task_kwargs() == {}
    assert not tracing.current().is_recording()


def test_a_task_without_traceparent_starts_its_own_trace(spans):
    with tracing.task("idemdash.webhook.process", None):
        pass
    (span,) = spans.get_finished_spans()
    assert span.parent is None


def test_an_exception_in_a_span_is_recorded_and_raised(spans):
    with pytest.raises(RuntimeError), tracing.span("idemdash.receipt.claim"):
        raise RuntimeError("boom")
    (span,) = spans.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR
    assert json.dumps([e.name for e in span.events]) == '["exception"]'
