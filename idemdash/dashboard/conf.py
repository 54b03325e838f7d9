"""The dashboard's settings, flat `IDEMDASH_*` names, each optional (the convention of every
app's conf module), so that a host project mounting the dashboard needs none of them."""

from __future__ import annotations

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Where operators open the dashboard, for the links in alert notifications; empty: the
    # links are paths only (a host project sets its own address).
    "IDEMDASH_BASE_URL": "",
    # An incident nobody acknowledged is reminded about ("still failing") every this many
    # evaluations that find it firing (one a minute on the schedule), at most
    # IDEMDASH_INCIDENT_REMINDERS times; then one "exhausted" notice, and quiet until it
    # recovers (idemdash.dashboard.incidents).
    "IDEMDASH_INCIDENT_REMIND_EVERY": 30,
    # Where the alert rules migrate installs once (alerts.DEFAULT_RULES) send by email; empty:
    # none is installed (a host's default; idemdash's own settings give admin@localhost).
    "IDEMDASH_DEFAULT_ALERTS_TO": "",
    "IDEMDASH_INCIDENT_REMINDERS": 2,
    # The health checks' window, the fewest rows a rate is divided by, and (warn, bad) per
    # check over health.DEFAULT_THRESHOLDS (docs/dashboard.md, "Health at a glance").
    "IDEMDASH_HEALTH_WINDOW_MINUTES": 15,
    "IDEMDASH_HEALTH_MIN_SAMPLE": 20,
    "IDEMDASH_HEALTH_THRESHOLDS": {},
    # OpenTelemetry (docs/operations.md, "OpenTelemetry"): IDEMDASH_OTEL sets the process's
    # tracer provider to the SDK's at start-up, exporting spans by OTLP/HTTP to
    # OTEL_EXPORTER_OTLP_ENDPOINT (a host with its own SDK set-up leaves it off);
    # IDEMDASH_OTEL_METRICS reports the /metrics figures as OpenTelemetry instruments too,
    # exported with the spans when IDEMDASH_OTEL is on, else read by the host's meter provider.
    "IDEMDASH_OTEL": False,
    "IDEMDASH_OTEL_METRICS": False,
}


def setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
