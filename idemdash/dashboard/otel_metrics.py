"""idemdash's figures through OpenTelemetry metrics: the alternative to `/metrics` for a
collector that takes OTLP instead of scraping Prometheus' text.

The same figures (`idemdash/dashboard/metrics.py:figures`), as observable instruments on the
`idemdash` meter: a counter for each `_total` and a gauge for the rest, named as Prometheus
names them with dots (`idemdash_receipt_claims_total` is `idemdash.receipt.claims`).
Registered at start-up when IDEMDASH_OTEL_METRICS is on (idemdash/dashboard/apps.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.utils import timezone

from idemdash.dashboard import metrics

# A collection reads the database once for all the instruments: the first callback of a
# collection reads, the others take that reading while it is this fresh.
SNAPSHOT_SECONDS = 1.0

_lock = threading.Lock()
_snapshot: tuple[float, dict[str, list[tuple[dict[str, str], float]]]] | None = None
_registered: list[Any] = []


def instrument_name(prometheus_name: str) -> str:
    return prometheus_name.removesuffix("_total").replace("_", ".")


def _figures() -> dict[str, list[tuple[dict[str, str], float]]]:
    global _snapshot
    with _lock:
        if _snapshot is None or time.monotonic() - _snapshot[0] > SNAPSHOT_SECONDS:
            _snapshot = (time.monotonic(), metrics.figures(timezone.now()))
        return _snapshot[1]


def _callback(name: str) -> Callable[[Any], Iterable[Any]]:
    from opentelemetry.metrics import Observation

    def observe(options: Any) -> Iterable[Any]:
        return [Observation(value, labels) for labels, value in _figures().get(name, [])]

    return observe


def register(meter: Any = None) -> list[Any]:
    """Create the instruments on `meter` (default: the global provider's `idemdash` meter);
    once per process for the default meter. On whatever meter provider the process has
    (`idemdash.core.tracing.configure`'s, or the host's); a provider set after registration
    still gets them (the API's proxy meter)."""
    from opentelemetry import metrics as otel_metrics

    default = meter is None
    if default and _registered:
        return _registered
    meter = meter or otel_metrics.get_meter("idemdash")
    instruments = []
    for name, description in metrics.HELP.items():
        if name in metrics.HISTOGRAMS:
            # OpenTelemetry has no observable histogram to report pre-counted buckets through;
            # the durations reach a tracing backend as the spans' own (docs/operations.md).
            continue
        unit = "s" if name.endswith("_seconds") else "1"
        create = meter.create_observable_counter if name.endswith("_total") else meter.create_observable_gauge
        instruments.append(create(instrument_name(name), callbacks=[_callback(name)], unit=unit, description=description))
    if default:
        _registered.extend(instruments)
    return instruments
