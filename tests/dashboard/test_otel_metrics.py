"""The /metrics figures as OpenTelemetry instruments (idemdash/dashboard/otel_metrics.py), read
by the SDK's InMemoryMetricReader: every Prometheus metric has its instrument, each reports
what a scrape reports, and a collection reads the database once for all of them."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client.parser import text_string_to_metric_families

from idemdash.core.clients import create_token
from idemdash.dashboard import metrics, otel_metrics
from receipts import store

# A scrape's histogram families (their _bucket, _sum and _count samples): Prometheus only.
HISTOGRAM_FAMILIES = set(metrics.HISTOGRAMS)


@pytest.fixture
def reader():
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    otel_metrics.register(provider.get_meter("idemdash"))
    otel_metrics._snapshot = None
    yield reader
    provider.shutdown()


def collected(reader: InMemoryMetricReader) -> dict[str, dict[tuple, float]]:
    found: dict[str, dict[tuple, float]] = {}
    for resource_metrics in reader.get_metrics_data().resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                found[metric.name] = {tuple(sorted(p.attributes.items())): p.value for p in metric.data.data_points}
    return found


def scraped(client) -> dict[str, dict[tuple, float]]:
    found: dict[str, dict[tuple, float]] = {}
    _, token = create_token("scraper")
    text = client.get("/metrics", headers={"Authorization": f"Bearer {token}"}).content.decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_created") or family.name in HISTOGRAM_FAMILIES:
                continue
            found.setdefault(otel_metrics.instrument_name(sample.name), {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


@pytest.mark.django_db
def test_every_figure_of_a_scrape_is_an_instrument_with_the_same_values(reader, client):
    for key in ("a", "b"):
        result = store.claim("client:m", key, "email.send", {"k": key})
        store.complete(store.Held("client:m", key, result.token), body="{}")
    store.claim("client:m", "a", "email.send", {"k": "a"})  # a replay
    got = collected(reader)
    assert got["idemdash.receipt.claims"][(("outcome", "claimed"),)] == 2
    assert got["idemdash.receipt.claims"][(("outcome", "replayed"),)] == 1
    assert got["idemdash.receipt.settles"][(("outcome", "completed"),)] == 2
    assert got["idemdash.outbox.messages.pending"] == {(): 0}
    # Every gauge is there; a counter with nothing counted yet has no point, as in a scrape.
    reported = [name for name in metrics.HELP if name not in metrics.HISTOGRAMS]
    gauges = {otel_metrics.instrument_name(name) for name in reported if not name.endswith("_total")}
    assert gauges <= set(got) <= {otel_metrics.instrument_name(name) for name in reported}
    assert got == scraped(client)


@pytest.mark.django_db
def test_one_collection_reads_the_figures_once(reader):
    with CaptureQueriesContext(connection) as once:
        metrics.figures(timezone.now())
    with CaptureQueriesContext(connection) as collection:
        collected(reader)
    assert len(collection) == len(once)


def test_counters_are_counters_and_the_rest_gauges(reader):
    from opentelemetry.sdk.metrics.export import Gauge, Sum

    otel_metrics._snapshot = (float("inf"), {name: [({}, 1)] for name in metrics.HELP})
    for name, points in collected(reader).items():
        assert points == {(): 1}
    kinds = {m.name: type(m.data) for rm in reader.get_metrics_data().resource_metrics
             for sm in rm.scope_metrics for m in sm.metrics}
    for prometheus_name in metrics.HELP:
        if prometheus_name in metrics.HISTOGRAMS:
            assert otel_metrics.instrument_name(prometheus_name) not in kinds  # Prometheus only
            continue
        expected = Sum if prometheus_name.endswith("_total") else Gauge
        assert kinds[otel_metrics.instrument_name(prometheus_name)] is expected
