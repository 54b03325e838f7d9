"""The soak's own arithmetic (idemdash/devtools/soak/run.py): a double or a loss of each kind is
found and named, and a clean run finds none. The soak itself runs in .ci/run (`make soak`, one
minute of faults on PostgreSQL) and fails there on any finding."""

from __future__ import annotations

from collections import Counter

import pytest

from idemdash.devtools.soak import run


def _tally() -> run.Tally:
    tally = run.Tally()
    tally.answered = {"k1": "/soak/effect/", "k2": "/soak/effect/?outbox=1"}
    tally.delivered = {"evt_1", "evt_2"}
    return tally


def test_a_clean_run_finds_nothing():
    doubles, lost = run.findings(_tally(), Counter(k1=1, k2=1), Counter(evt_1=1, evt_2=1), {"out:k2"},
                                 Counter({"out:k2": 1}))
    assert not any(doubles.values()) and not any(lost.values())


def test_each_kind_of_double_is_found():
    tally = _tally()
    tally.replays_that_ran = ["k1"]
    doubles, _ = run.findings(tally, Counter(k1=2, k2=1), Counter(evt_1=1, evt_2=3), set(), Counter())
    assert doubles == {"view effects": ["k1"], "handler effects": ["evt_2"], "replays that ran the view": ["k1"]}


def test_each_kind_of_loss_is_found():
    _, lost = run.findings(_tally(), Counter(k1=1), Counter(evt_1=1), {"out:k2"}, Counter())
    assert lost == {
        "answered keys without an effect": ["k2"],
        "delivered events never handled": ["evt_2"],
        "committed messages never accepted": ["out:k2"],
    }


def test_a_receiver_post_repeated_under_its_key_is_not_a_double():
    # At-least-once delivery of the outbox, absorbed by the partner's Idempotency-Key.
    doubles, lost = run.findings(_tally(), Counter(k1=1, k2=1), Counter(evt_1=1, evt_2=1), {"out:k2"},
                                 Counter({"out:k2": 3}))
    assert not any(doubles.values()) and not any(lost.values())


def test_the_soak_refuses_a_database_it_cannot_fault(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "sqlite:///var/soak.sqlite3")
    with pytest.raises(SystemExit):
        run.main(["--seconds", "30"])


def test_the_soak_is_bounded(monkeypatch):
    with pytest.raises(SystemExit):
        run.main(["--seconds", "100000"])


def test_a_clean_run_has_no_failures():
    tally = _tally()
    tally.requests.update({"claim: 201": 2, "claim: 503": 1, "claim: connection error": 3, "delivery: 200": 2})
    assert run.failures(tally) == []


def test_a_500_fails_the_run_and_so_does_a_run_that_answered_nothing():
    tally = _tally()
    tally.requests.update({"claim: 201": 2, "delivery: 500": 4})
    assert run.failures(tally) == ["delivery: 4 answered 500"]
    # What a soak against a database migrated by another chain saw: only 500s, so nothing
    # answered, no double and no loss among the answered keys, and yet a broken service.
    broken = run.Tally()
    broken.requests.update({"claim: 500": 240, "delivery: 500": 126})
    assert run.failures(broken) == [
        "claim: 240 answered 500", "delivery: 126 answered 500", "no claim was answered", "no delivery was accepted",
    ]
