"""`make bench QUICK=1` end to end: every figure is measured (a number > 0). Timings are
not asserted: CI machines are shared and slow. What `--only` accepts, runs and writes is
tested in process (tests/devtools/bench/test_only.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

HAS_DRF_IDEMPOTENCY = importlib.util.find_spec("drf_idempotency") is not None

# Scenario 13: the partitioned prototype beside the product's claim, and retention by DROP.
PARTITION_FIGURES = {
    "partition.vs_single", "partition.vs_product", "partition.headroom",
    *(f"partition.{v}_{what}" for v in ("product", "single", "partitioned") for what in ("cps", "p50", "p99")),
    "partition.delete_s", "partition.drop_s", "partition.drop_ratio", "partition.claims_purge_rps",
}

FIGURES = {
    "claim.ratio", "claim.bare_rps", "claim.protected_rps", "claim.bare_p50", "claim.bare_p99",
    "claim.protected_p50", "claim.protected_p99",
    "replay.ratio", "replay.rps", "replay.p50", "replay.p99",
    "api.roundtrips", "api.p50", "api.p99",
    "webhook.new_ratio", "webhook.dup_ratio", "webhook.new_rps", "webhook.dup_rps", "webhook.new_p99",
    "webhook.dup_p99",
    "seed.receipts", "seed.rows_per_s", "dashboard.overview", "dashboard.filtered", "dashboard.detail", "dashboard.stats",
    "dashboard.overview_30d",
    "purge.rows_per_s", "purge.claim_p99_ratio", "purge.claim_p99_during", "purge.claim_p99_without",
    "memory.web_worker", "memory.qcluster_worker",
    "outbox.latency_p50", "outbox.latency_p99",
    "run_once.insert_us", "run_once.ratio", "run_once.replay_ratio",
    "search.order", "search.miss", "search.trace", "search.common",
    "floor.vs_floor", "floor.protected_ratio", "floor.floor_ratio", "floor.vs_ceiling", "floor.replay_ratio",
    "floor.ceiling_ratio", "floor.bare_rps", "floor.protected_rps", "floor.floor_rps",
    *(f"floor.{v}_{p}" for v in ("bare", "protected", "floor") for p in ("p50", "p99")),
    "floor.cpu0", "floor.cpu1", "floor.cpu2",
    *PARTITION_FIGURES,
    # Scenario 14: the bare insert with and without the observer of unprotected routes.
    "observe.ratio", "observe.notes", "observe.duplicates", "observe.bare_rps", "observe.observed_rps",
    *(f"observe.{v}_{p}" for v in ("bare", "observed") for p in ("p50", "p99")), "observe.cpu0", "observe.cpu1",
    # CPU per request of each compared variant, with its breakdown by process in the note.
    "claim.cpu0", "claim.cpu1", "replay.cpu0", "replay.cpu1", "webhook.cpu0", "webhook.cpu1", "webhook.cpu2",
    # The same DRF view unprotected, under idemdash and, where the `bench` extra is installed
    # (Django 5.2 only, as drf-idempotency 1.0 requires), under drf-idempotency.
    "drf.unprotected_rps",
    *(f"drf.{layer}.{what}" for layer in ("idemdash", "drf-idempotency")[:2 if HAS_DRF_IDEMPOTENCY else 1]
      for what in ("fresh_ratio", "replay_ratio", "fresh_rps", "replay_rps", "fresh_p99")),
}


# Every scenario at quick sizes on a two-core machine shared with the rest of the suite: about
# four minutes; bounded well above it.
@pytest.mark.timeout(600)
def test_the_quick_bench_measures_every_figure(tmp_path: Path, database_of_its_own):
    db = settings.DATABASES["default"]
    env = {**os.environ, "DATABASE_URL": database_of_its_own("idemdash_bench_test")}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    assert db["ENGINE"].endswith("postgresql")
    done = subprocess.run(
        [sys.executable, "-m", "idemdash.devtools.bench", "--quick", "--out", str(tmp_path)],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=540,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    report = json.loads((tmp_path / "latest.json").read_text())
    figures = {f["id"]: f for f in report["figures"]}
    assert set(figures) == FIGURES
    for figure in figures.values():
        if figure["id"] != "observe.duplicates":  # every body distinct: none
            assert figure["value"] is not None and figure["value"] > 0, figure
    # The observer noted every request of scenario 14's observed rounds, and none was a would-be duplicate.
    assert figures["observe.notes"]["met"] and figures["observe.duplicates"]["value"] == 0
    for fid in ("claim.cpu1", "webhook.cpu1"):
        parts = dict(part.split() for part in figures[fid]["note"].split(", "))
        assert {"client", "web", "db"} <= set(parts) and all(float(ms) >= 0 for ms in parts.values()), figures[fid]
    assert "qcluster" in figures["webhook.cpu1"]["note"]
    assert report["meta"]["mode"] == "quick" and report["meta"]["cores"] >= 1
    assert (tmp_path / "latest.html").exists() and (tmp_path / "plotly.min.js").exists()
    # Scenario 13: every claim of every round took a fresh key, so each one won.
    rounds = report["details"]["rounds"]["13 past one table"]
    assert all(v["statuses"]["won"] == v["requests"] > 0 for r in rounds for v in r.values()), rounds
    # The table on stdout names every figure's target.
    assert ">= 0.8" in done.stdout and ">= 20000" in done.stdout

