"""`python -m idemdash.devtools.bench --only N,...` in this process: what it accepts, which
scenarios such a run measures and what it writes. The servers, the load and the seeding are
stand-ins here; tests/devtools/bench/test_bench_quick.py runs the real quick bench once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from idemdash.devtools.bench import __main__ as bench_main, runner, servers
from idemdash.devtools.bench.report import Figure

# Each scenario's function in runner.run, by number, and the group of the figure its stand-in gives.
SCENARIOS = {1: "claim_overhead", 2: "replay", 3: "claim_api", 4: "webhook_ingest", 5: "dashboard", 6: "purge",
             8: "drf_view", 9: "outbox_latency", 10: "inprocess_run_once", 11: "search_at_scale", 12: "floor_and_ceiling",
             13: "past_one_table", 14: "observer_cost"}


@pytest.mark.parametrize("only", ["7", "x", "0,1"])
def test_only_refuses_what_is_not_a_scenario_number(only: str, capsys, monkeypatch):
    monkeypatch.setattr(servers, "ensure_database", lambda url: pytest.fail("reached the database"))
    with pytest.raises(SystemExit) as exited:
        bench_main.main(["--only", only])
    assert exited.value.code == 2 and "--only" in capsys.readouterr().err


def test_only_takes_a_comma_separated_list_of_scenario_numbers(monkeypatch, tmp_path):
    asked = {}
    monkeypatch.setattr(servers, "ensure_database", lambda url: None)
    monkeypatch.setattr(runner, "run", lambda **kw: asked.update(kw) or 0)
    for name in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "SECRET_KEY"):  # main() sets them for its servers
        monkeypatch.setenv(name, os.environ.get(name, "x"))
    assert bench_main.main(["--quick", "--only", "2, 13,", "--out", str(tmp_path)]) == 0
    assert asked["only"] == {2, 13} and asked["quick"] is True and asked["out_dir"] == tmp_path


class StandIn:
    """A server that never started."""

    def stop(self) -> None:
        pass


@pytest.fixture
def stand_ins(monkeypatch) -> dict[str, list]:
    """runner.run with every scenario, server and load replaced: what ran is recorded."""
    ran: dict[str, list] = {"scenarios": [], "seeded": []}
    for number, name in SCENARIOS.items():
        def scenario(b, number=number, name=name) -> list[Figure]:
            ran["scenarios"].append(number)
            return [Figure(f"s{number}.figure", name, name, 1.0, "x")]
        monkeypatch.setattr(runner, name, scenario)
    monkeypatch.setattr("django.core.management.call_command", lambda *a, **kw: None)
    monkeypatch.setattr(runner, "meta", lambda quick, started: {"mode": "quick" if quick else "full", "cores": 2})
    monkeypatch.setattr(runner, "reset_bench_rows", lambda: None)
    monkeypatch.setattr(runner, "seed_to_size", lambda b, always: ran["seeded"].append(always))
    monkeypatch.setattr(runner, "warm_up", lambda b: None)
    monkeypatch.setattr(runner.servers, "free_port", lambda: 9)
    monkeypatch.setattr(runner.servers, "start_gunicorn", lambda port, out_dir: StandIn())
    monkeypatch.setattr(runner.servers, "start_qcluster", lambda out_dir: StandIn())
    monkeypatch.setattr(runner, "memory_figures", lambda b, web, cluster: [Figure("memory.web_worker", "7", "m", 1.0, "MiB")])
    return ran


@pytest.mark.django_db
def test_only_runs_the_named_scenarios_and_leaves_the_latest_complete_run_alone(stand_ins, tmp_path: Path):
    (tmp_path / "latest.json").write_text("{}")
    assert runner.run(quick=True, port=None, out_dir=tmp_path, only={2, 9}) == 0
    assert stand_ins["scenarios"] == [2, 9] and stand_ins["seeded"] == [True]
    assert (tmp_path / "latest.json").read_text() == "{}"
    assert not (tmp_path / "latest.html").exists()
    (written,) = tmp_path.glob("bench-*-only.json")
    report = json.loads(written.read_text())
    assert [f["id"] for f in report["figures"]] == ["s2.figure", "s9.figure", "memory.web_worker"]  # memory ends every run
    assert report["meta"]["only"] == [2, 9]


@pytest.mark.django_db
@pytest.mark.parametrize("only", [{13}, {14}, {13, 14}])
def test_only_13_and_14_seed_nothing(only: set[int], stand_ins, tmp_path: Path, capsys):
    assert runner.run(quick=True, port=None, out_dir=tmp_path, only=only) == 0
    assert stand_ins["scenarios"] == sorted(only) and stand_ins["seeded"] == []
    assert "not seeded" in capsys.readouterr().out



def test_the_bench_row_stays_the_bench_apps_where_the_bench_is_not_installed():
    # The suite imports the bench in process without its app: a model found under the devtools
    # app instead made `makemigrations --check` fail in whichever test ran after this file.
    from django.apps import apps

    from idemdash.devtools.bench.models import BenchRow

    assert BenchRow._meta.app_label == "bench"
    assert BenchRow not in apps.get_models()
