"""Scenario 14, the observer's cost, in this process: which server each variant's requests go
to, what the observed server is started with, and that its figures count the notes it wrote.
The servers and the load are stand-ins (the load writes the notes an observed server would);
nothing is timed. That the observed settings keep the observer and the bench's leave it out is
tests/devtools/test_settings.py's."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.utils import timezone

from idemdash.devtools.bench import loadgen, runner
from receipts.models import ObservedRequest

OBSERVED_URL = "http://127.0.0.1:9"


class Recorder:
    """A client that answers every POST 201 and keeps its path and JSON body."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def post(self, path: str, json: Any = None, **kw: Any) -> httpx.Response:
        self.sent.append((path, json))
        return httpx.Response(201)


@pytest.fixture
def scenario(monkeypatch, tmp_path: Path) -> dict[str, Any]:
    """runner.observer_cost with gunicorn and the load replaced: each load sends its requests to
    a Recorder, and a load against the observed server notes each one as its observer would
    (its fingerprint the body's, or the one `fingerprint` gives)."""
    seen: dict[str, Any] = {"started": [], "loads": [], "fingerprint": None}

    class Server:
        def stop(self) -> None:
            seen["stopped"] = True

    def start_gunicorn(port: int, out_dir: Path, **kw: Any) -> Server:
        seen["started"].append({"port": port, **kw})
        return Server()

    def load(b: runner.Bench, name: str, request: loadgen.Request, *, base_url: str | None = None,
             **kw: Any) -> loadgen.LoadResult:
        client = Recorder()
        for n in range(kw.get("max_requests", b.sizes.requests)):
            request(client, n)
        seen["loads"].append((name, base_url, client.sent))
        if base_url is not None:
            fingerprint = seen["fingerprint"] or (lambda body: hashlib.sha256(json.dumps(body).encode()).hexdigest())
            ObservedRequest.objects.bulk_create(
                ObservedRequest(method="POST", route=path.lstrip("/"), caller="anonymous", at=timezone.now(),
                                fingerprint=fingerprint(body)) for path, body in client.sent)
        return loadgen.LoadResult(name, latencies=[0.001] * len(client.sent), statuses={201: len(client.sent)},
                                  elapsed=1.0)

    monkeypatch.setattr(runner.servers, "free_port", lambda: 9)
    monkeypatch.setattr(runner.servers, "start_gunicorn", start_gunicorn)
    monkeypatch.setattr(runner.Bench, "load", load)
    monkeypatch.setattr(runner.connection, "close", lambda: None)  # the test's transaction stays open
    seen["bench"] = runner.Bench(runner.QUICK, "http://127.0.0.1:8", tmp_path)
    return seen


@pytest.mark.django_db
def test_the_observed_variant_runs_on_a_second_server_that_keeps_the_observer(scenario):
    runner.observer_cost(scenario["bench"])
    assert scenario["started"] == [{"port": 9, "name": "gunicorn-observed", "settings_module": runner.OBSERVED_SETTINGS}]
    assert scenario["stopped"] and "web observed" not in scenario["bench"].running
    measured = [(name, url) for name, url, _ in scenario["loads"] if not name.startswith("warm-up")]
    # Alternating rounds: the bench's own server (no observer), then the observed one, then back.
    assert measured == [("bare insert", None), ("bare insert, observed", OBSERVED_URL),
                        ("bare insert, observed", OBSERVED_URL), ("bare insert", None)]
    # The same route on both servers, and no body twice in the run.
    sent = [request for _, _, requests in scenario["loads"] for request in requests]
    assert {path for path, _ in sent} == {"/" + runner.BARE_ROUTE}
    assert len({json.dumps(body) for _, body in sent}) == len(sent)


@pytest.mark.django_db
def test_its_row_has_the_ratio_against_the_budget_and_the_notes_counted(scenario):
    figures = {f.id: f for f in runner.observer_cost(scenario["bench"])}
    ratio = figures["observe.ratio"]
    assert (ratio.op, ratio.bound, ratio.unit) == (">=", 0.95, "x") and "5%" in ratio.note
    # The measured rounds' requests, each noted once (the warm-up's are before the count starts).
    answered = 2 * runner.QUICK.requests
    assert figures["observe.notes"].value == answered and figures["observe.notes"].bound == answered
    assert figures["observe.notes"].met
    assert figures["observe.duplicates"].value == 0 and figures["observe.duplicates"].met
    assert {"observe.bare_rps", "observe.observed_rps", "observe.cpu0", "observe.cpu1"} <= set(figures)


@pytest.mark.django_db
def test_would_be_duplicates_are_counted_from_the_notes_not_assumed(scenario):
    scenario["fingerprint"] = lambda body: "same" if body["n"] < 3 else json.dumps(body)
    figures = {f.id: f for f in runner.observer_cost(scenario["bench"])}
    # Three repeated bodies in each of two rounds, the first of them already noted in the warm-up.
    assert figures["observe.duplicates"].value == 6 and figures["observe.duplicates"].met is False
