"""/metrics through prometheus_client (idemdash/dashboard/metrics.py), and what ships beside it:
the exposition passes `promtool check metrics`, the alert rules `promtool check rules`, every
query of the rules and the Grafana dashboard names a metric that is exported, the counters and
the duration histograms (buckets, sum, count) never go down when retention purges the roll-up
rows they were read from, and rejected deliveries are counted past the table's cap. The agreement of each
figure with /api/v1/stats and the tiles is tests/dashboard/test_stats.py's.

promtool is Debian's `prometheus` package; .ci/run installs it and sets
IDEMDASH_REQUIRE_PROMTOOL=1, where a missing promtool fails instead of skipping."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import time_machine
from prometheus_client.parser import text_string_to_metric_families

from idemdash.core import rollup
from idemdash.core.clients import create_token
from idemdash.dashboard.metrics import HELP, HISTOGRAMS
from receipts import retention, store
from receipts.models import Attempt, AttemptHourly, ClaimDurationHourly
from receipts.outbox.models import OutboxAttempt, SendDurationHourly
from tests.dashboard.build import webhook_event
from tests.webhooks.conftest import STRIPE_SECRET, make_endpoint
from webhooks.models import ProcessingDurationHourly, RejectedDelivery, WebhookAttempt
from webhooks.receive import record_rejection

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "monitoring" / "prometheus-rules.yml"
DASHBOARD = ROOT / "docs" / "monitoring" / "grafana-dashboard.json"
PROMTOOL = shutil.which("promtool")

needs_promtool = pytest.mark.skipif(
    PROMTOOL is None and os.environ.get("IDEMDASH_REQUIRE_PROMTOOL") != "1",
    reason="promtool (Debian's prometheus package) is not installed",
)


def _promtool(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    assert PROMTOOL, "IDEMDASH_REQUIRE_PROMTOOL=1 but promtool is not on PATH"
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, timeout=60)


def _scrape(client, **headers) -> str:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    return response.content.decode()


def _claim_and_complete(key: str) -> None:
    result = store.claim("client:metrics", key, "email.send", {"k": key})
    store.complete(store.Held("client:metrics", key, result.token), body="{}")


@pytest.mark.slow
@pytest.mark.django_db
@needs_promtool
def test_the_exposition_passes_promtool(client):
    _claim_and_complete("a")
    _durations(datetime(2026, 1, 5, 10, tzinfo=timezone.utc), claims=[0.4, 30], sends=[20], runs=[7])
    record_rejection(None, "stripe", "no_matching_signature", "forged", b"{}")
    _, token = create_token("scraper")
    text = _scrape(client, Authorization=f"Bearer {token}")
    checked = _promtool("check", "metrics", stdin=text.encode())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not checked.stdout.strip() and not checked.stderr.strip()  # no lint remarks either


@pytest.mark.django_db
def test_every_metric_is_exported_with_its_help_and_type(viewer_client):
    families = {f.name: f for f in text_string_to_metric_families(_scrape(viewer_client))}
    exported = {name + ("_total" if family.type == "counter" else "") for name, family in families.items()}
    assert exported == set(HELP)
    for name, family in families.items():
        kind = "counter" if name + "_total" in HELP else "histogram" if name in HISTOGRAMS else "gauge"
        assert family.type == kind
        assert family.documentation


@pytest.mark.django_db
def test_no_label_carries_a_key_a_scope_or_a_user(viewer_client):
    _claim_and_complete("secret-order-42")
    for family in text_string_to_metric_families(_scrape(viewer_client)):
        for sample in family.samples:
            assert set(sample.labels) <= {"outcome", "kind", "payload_matches", "reason", "le"}, sample
            assert "secret-order-42" not in json.dumps(sample.labels)


@pytest.mark.slow
@needs_promtool
def test_the_alert_rules_pass_promtool():
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _metric_names(expr: str) -> set[str]:
    """The metrics an expression reads, a histogram's series by the histogram's name."""
    names = set()
    for name in re.findall(r"\bidemdash_\w+", expr):
        series_of = re.sub(r"_(bucket|sum|count)$", "", name)
        names.add(series_of if series_of in HISTOGRAMS else name)
    return names


def test_the_rules_and_the_dashboard_query_only_exported_metrics():
    rule_exprs = re.findall(r"expr: (.+?)(?=\n\s+(?:for|labels):)", RULES.read_text(), re.S)
    dashboard = json.loads(DASHBOARD.read_text())
    panel_exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(rule_exprs) >= 8 and len(panel_exprs) >= 12
    used = set().union(*map(_metric_names, rule_exprs + panel_exprs))
    assert used <= set(HELP), used - set(HELP)
    # Every metric is on the dashboard.
    assert set(HELP) <= set().union(*map(_metric_names, panel_exprs))
    assert dashboard["uid"] and {p["id"] for p in dashboard["panels"]} == set(range(1, len(dashboard["panels"]) + 1))


@pytest.mark.django_db(transaction=True)
def test_counters_do_not_go_down_when_retention_purges_their_roll_ups(viewer_client, settings):
    settings.RECEIPTS_ROLLUP_RETENTION_DAYS = 31
    then = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)
    with time_machine.travel(then, tick=False):
        for n in range(3):
            _claim_and_complete(f"old-{n}")
    with time_machine.travel(then + timedelta(hours=2), tick=False):
        rollup.catch_up()
        assert AttemptHourly.objects.exists()
        before = _claims(viewer_client)
    later = then + timedelta(days=60)
    with time_machine.travel(later, tick=False):
        retention.purge()
        assert not AttemptHourly.objects.exists()  # the roll-up rows went, and the attempts
        _claim_and_complete("new")
        after = _claims(viewer_client)
    assert before == {"claimed": 3}
    assert after == {"claimed": 4}


def _claims(client) -> dict[str, float]:
    for family in text_string_to_metric_families(_scrape(client)):
        if family.name == "idemdash_receipt_claims":
            return {s.labels["outcome"]: s.value for s in family.samples if s.name.endswith("_total")}
    raise AssertionError("no idemdash_receipt_claims")


# --- histograms: claim, processing and send durations -----------------------------------------

def _durations(when: datetime, claims: list[float], sends: list[int], runs: list[int]) -> None:
    """Log lines with known durations at `when`: claims (with a settle each, which has none),
    outbox sends and webhook handler runs."""
    for i, ms in enumerate(claims):
        Attempt.objects.create(scope="s", key=f"c{when:%j%H}-{i}", operation="op", outcome="claimed",
                               created_at=when, claim_ms=ms)
        Attempt.objects.create(scope="s", key=f"c{when:%j%H}-{i}", operation="op", outcome="completed",
                               created_at=when)
    for i, ms in enumerate(sends):
        OutboxAttempt.objects.create(key=f"o{when:%j%H}-{i}", action="http.post", number=1, fencing_token=1,
                                     outcome="sent", created_at=when, duration_ms=ms)
    if runs:
        with time_machine.travel(when, tick=False):
            event = webhook_event(f"evt_{when:%j%H}")  # received: no handler run of its own
        for ms in runs:
            WebhookAttempt.objects.create(event=event, number=1, outcome="completed", started_at=when,
                                          finished_at=when, duration_ms=ms)


def _histograms(client) -> dict[str, dict[str, float]]:
    """{histogram: {le or "sum" or "count": value}}."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(_scrape(client)):
        if family.type == "histogram":
            series = found.setdefault(family.name, {})
            for s in family.samples:
                series[s.labels["le"] if s.name.endswith("_bucket") else s.name.rsplit("_", 1)[1]] = s.value
    return found


@pytest.mark.django_db
def test_the_histograms_are_cumulative_in_seconds_with_their_sum_and_count(viewer_client):
    _durations(datetime(2026, 1, 5, 10, tzinfo=timezone.utc), claims=[0.4, 0.4, 0.4, 30], sends=[20, 20, 4000],
               runs=[7, 70_000])
    found = _histograms(viewer_client)
    assert set(found) == set(HISTOGRAMS)
    claims = found["idemdash_receipt_claim_duration_seconds"]
    # A bucket holds durations below its bound; Prometheus' buckets add up every smaller one.
    assert (claims["0.00025"], claims["0.0005"], claims["0.025"], claims["0.05"], claims["+Inf"]) == (0, 3, 3, 4, 4)
    assert claims["count"] == 4 and claims["sum"] == pytest.approx(0.0312)  # the settles are no claims
    sends = found["idemdash_outbox_send_duration_seconds"]
    assert (sends["0.01"], sends["0.025"], sends["2.5"], sends["5.0"], sends["+Inf"], sends["count"]) == (0, 2, 2, 3, 3, 3)
    assert sends["sum"] == pytest.approx(4.04)
    runs = found["idemdash_webhook_processing_duration_seconds"]
    assert (runs["0.005"], runs["0.01"], runs["60.0"], runs["+Inf"], runs["sum"]) == (0, 1, 1, 2, pytest.approx(70.007))
    for series in found.values():
        bounds = sorted((float(le), n) for le, n in series.items() if le not in ("sum", "count"))
        assert [n for _, n in bounds] == sorted(n for _, n in bounds)  # cumulative, never down


@pytest.mark.django_db(transaction=True)
def test_the_histograms_do_not_go_down_when_retention_purges_their_roll_ups(viewer_client, settings):
    settings.RECEIPTS_ROLLUP_RETENTION_DAYS = 31
    settings.OUTBOX_ATTEMPT_ROLLUP_RETENTION_DAYS = 31
    settings.WEBHOOKS_ROLLUP_RETENTION_DAYS = 31
    then = datetime(2026, 1, 5, 10, 0, tzinfo=timezone.utc)
    _durations(then, claims=[0.4, 3, 30], sends=[20, 4000], runs=[7, 70])
    with time_machine.travel(then + timedelta(hours=2), tick=False):
        rollup.catch_up()
        assert ClaimDurationHourly.objects.exists() and SendDurationHourly.objects.exists()
        before = _histograms(viewer_client)
    later = then + timedelta(days=60)
    with time_machine.travel(later, tick=False):
        retention.purge()
        # The roll-up rows went, and the claims and sends they counted (the log's own retention).
        assert not ClaimDurationHourly.objects.exists() and not SendDurationHourly.objects.exists()
        assert not ProcessingDurationHourly.objects.exists()
        assert not Attempt.objects.exists() and not OutboxAttempt.objects.exists()
        unchanged = _histograms(viewer_client)
        _durations(later, claims=[0.4], sends=[20], runs=[7])
        after = _histograms(viewer_client)
    assert unchanged == before
    for name, series in before.items():
        assert after[name]["count"] == series["count"] + 1
        assert after[name]["sum"] > series["sum"]
        assert all(after[name][le] >= n for le, n in series.items())
    assert before["idemdash_receipt_claim_duration_seconds"]["count"] == 3


# --- rejected webhook deliveries ----------------------------------------------------------------

@pytest.mark.django_db
def test_rejected_deliveries_are_counted_by_reason_every_reason_from_zero(viewer_client, client, settings):
    settings.WEBHOOKS_REJECTED_MAX_ROWS = 1
    endpoint = make_endpoint("stripe-metrics", "stripe", STRIPE_SECRET)
    body = json.dumps({"id": "evt_1", "type": "x"}).encode()
    for _ in range(3):
        response = client.post(f"/webhooks/{endpoint.slug}/", data=body, content_type="application/json",
                                headers={"Stripe-Signature": "t=1,v1=forged-signature-text"})
        assert response.status_code == 400
    rejected = {}
    for family in text_string_to_metric_families(_scrape(viewer_client)):
        if family.name == "idemdash_webhook_deliveries_rejected":
            rejected = {s.labels["reason"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert set(rejected) == set(RejectedDelivery.Cause.values)  # a closed set, nothing a caller sent
    assert sum(rejected.values()) == 3 and RejectedDelivery.objects.count() == 1  # the cap trims rows, not counts
