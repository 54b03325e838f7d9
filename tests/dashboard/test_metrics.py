"""/metrics through prometheus_client (idemdash/dashboard/metrics.py), and what ships beside it:
the exposition passes `promtool check metrics`, the alert rules `promtool check rules`, every
query of the rules and the Grafana dashboard names a metric that is exported, and the counters
never go down when retention purges the roll-up rows they were read from. The agreement of each
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
from idemdash.dashboard.metrics import HELP
from receipts import retention, store
from receipts.models import AttemptHourly

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
    store.complete("client:metrics", key, result.token, body="{}")


@pytest.mark.django_db
@needs_promtool
def test_the_exposition_passes_promtool(client):
    _claim_and_complete("a")
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
        assert family.type == ("counter" if name + "_total" in HELP else "gauge")
        assert family.documentation


@pytest.mark.django_db
def test_no_label_carries_a_key_a_scope_or_a_user(viewer_client):
    _claim_and_complete("secret-order-42")
    for family in text_string_to_metric_families(_scrape(viewer_client)):
        for sample in family.samples:
            assert set(sample.labels) <= {"outcome", "kind", "payload_matches"}, sample
            assert "secret-order-42" not in json.dumps(sample.labels)


@needs_promtool
def test_the_alert_rules_pass_promtool():
    checked = _promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bidemdash_\w+", expr))


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
