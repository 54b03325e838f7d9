"""The tick (idemdash/worker/liveness.py:tick) runs every app's declared TICKS and keeps going
past one that fails, logging it in one line. The tick in a real cluster: test_worker_health.py."""

from __future__ import annotations

import pytest

from idemdash.worker import liveness

pytestmark = pytest.mark.django_db


def test_the_tick_runs_every_app_s_ticks():
    assert list(liveness.tick()) == ["receipts.outbox.tasks.drain_due", "webhooks.tasks.sweep"]


def test_a_failing_tick_is_one_line_and_the_others_still_run(monkeypatch, caplog):
    monkeypatch.setattr(liveness, "declared_by_apps", lambda module, name: ["tests.nowhere.tick", "webhooks.tasks.sweep"])
    with caplog.at_level("WARNING", logger="idemdash.worker.liveness"):
        done = liveness.tick()
    assert done["tests.nowhere.tick"] == "failed" and done["webhooks.tasks.sweep"] != "failed"
    (record,) = caplog.records
    assert record.exc_info is None and record.getMessage().startswith("tick tests.nowhere.tick failed: ModuleNotFoundError")
