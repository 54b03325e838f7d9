"""`python -m idemdash.devtools.bench.ingest_cpu`: its deliveries are stored as the bench's
endpoint stores them (new events new, duplicates counted), and each kind gets a figure.
The figures' sizes are not asserted: they are timings."""

from __future__ import annotations

import pytest

from idemdash.devtools.bench.ingest_cpu import measure
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


def test_measure_posts_new_events_and_duplicates_through_the_endpoint():
    figures = measure(requests=4, rounds=2, duplicate_keys=2)

    assert set(figures) == {"new", "duplicate"}
    assert all(values["cpu_us"] > 0 and values["wall_us"] > 0 for values in figures.values())
    events = WebhookEvent.objects.filter(endpoint__slug="bench-stripe")
    new = events.filter(dedupe_key__contains="new")
    assert new.count() == 8 and set(new.values_list("delivery_count", flat=True)) == {1}
    # Two rounds of four deliveries over two events: each event counted four times.
    duplicates = events.filter(dedupe_key__contains="dup")
    assert sorted(duplicates.values_list("delivery_count", flat=True)) == [4, 4]
