"""receipts/testing.py and the pytest plugin's fixtures (receipts/pytest_plugin.py): each
helper passes on a step that is idempotent and fails on one that is not (a step that makes
its effect on every call, or sends the provider no key, or a new one on each attempt), on a
real database, with real threads, forked processes and a real SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from django.db import connections
from django.test import Client

import receipts
from idemdash.core.audit import AuditEntry
from receipts import store, testing
from receipts.models import Attempt, Receipt
from receipts.testing import (
    Provider,
    assert_held_after_crash,
    assert_runs_once,
    assert_runs_once_concurrently,
    assert_survives_crash_after_effect,
    assert_view_runs_once,
)
from tests.receipts import testing_urls

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider(tmp_path, monkeypatch) -> Provider:
    provider = Provider(tmp_path / "provider.jsonl", returns={"id": "ch_1"})
    monkeypatch.setattr(testing_urls, "PROVIDER", provider)
    return provider


def charging(provider: Provider, key: str = "charge:42"):
    """An idempotent step: run once per key, sending the provider the claim's downstream key."""

    def charge() -> dict:
        return provider(idempotency_key=receipts.current().downstream_key)

    return lambda: receipts.run_once(key, "payment.charge", charge)


def charging_every_time(provider: Provider):
    """Not idempotent: no claim, no key, an effect on every call."""
    return lambda: provider()


def post_charge(path: str = "/charge", key: str = "order-42"):
    return lambda: Client().post(path, {"order": "42"}, headers={"Idempotency-Key": key})


# --- Provider ------------------------------------------------------------------------------------

def test_a_provider_counts_one_effect_per_distinct_key_and_one_per_call_without_a_key(tmp_path):
    provider = Provider(tmp_path / "p.jsonl", returns="ok")
    assert provider(idempotency_key="a") == "ok"
    provider(idempotency_key="a")
    provider(idempotency_key="b")
    provider()
    provider()
    assert provider.keys() == ["a", "a", "b", None, None]
    assert provider.effects() == 4
    assert [call["claim"] for call in provider.calls()] == [None] * 5


# --- in a row -------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_step_run_three_times_in_a_row_passes_and_every_call_gets_its_result(provider):
    results = assert_runs_once(charging(provider), times=3, effects=provider.effects)
    assert results == [{"id": "ch_1"}] * 3
    assert len(provider.calls()) == 1


@pytest.mark.django_db
def test_a_step_that_makes_its_effect_on_every_call_fails_run_twice_assert_once(provider):
    with pytest.raises(AssertionError, match="called 2 times in a row: 2 effects, not 1"):
        assert_runs_once(charging_every_time(provider), effects=provider.effects)


@pytest.mark.django_db
def test_a_step_whose_calls_return_different_results_fails(provider):
    answers = iter([1, 2])
    effects = iter([0, 1])
    with pytest.raises(AssertionError, match="call 2 returned 2, not the first call's 1"):
        assert_runs_once(lambda: next(answers), effects=lambda: next(effects))


@pytest.mark.django_db
def test_one_call_proves_nothing_and_is_refused(provider):
    with pytest.raises(ValueError, match="needs 2 calls or more"):
        assert_runs_once(charging(provider), times=1, effects=provider.effects)


@pytest.mark.django_db
@pytest.mark.urls("tests.receipts.testing_urls")
def test_an_idempotent_view_sent_twice_with_one_key_answers_the_replay_of_its_first_response(provider):
    first, replay = assert_view_runs_once(Client(), "/charge", data={"order": "42"}, effects=provider.effects)
    assert first.status_code == 201 and first.json() == {"charged": "42"}
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert len(provider.calls()) == 1


@pytest.mark.slow
@pytest.mark.django_db
@pytest.mark.urls("tests.receipts.view_kinds_urls")
@pytest.mark.parametrize("path", ["/api-view", "/orders", "/ninja/capture"])
def test_a_drf_or_ninja_endpoint_sent_twice_through_drfs_api_client_makes_one_effect(path):
    from rest_framework.test import APIClient

    def effects() -> int:  # the views' side effect: tests/receipts/urls.py:side_effect
        return AuditEntry.objects.filter(action="test.side_effect").count()

    first, replay = assert_view_runs_once(APIClient(), path, data={"amount": 100}, format="json", effects=effects)
    assert first.status_code == replay.status_code == 201


@pytest.mark.django_db
@pytest.mark.urls("tests.receipts.testing_urls")
def test_a_view_that_ignores_the_idempotency_key_fails(provider):
    with pytest.raises(AssertionError, match="sent 2 times with one Idempotency-Key: 2 effects, not 1"):
        assert_view_runs_once(Client(), "/charge-every-time", data={"order": "42"}, effects=provider.effects)


# --- at the same moment ---------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_step_called_from_eight_threads_at_once_makes_one_effect(provider):
    seen = assert_runs_once_concurrently(charging(provider), threads=8, effects=provider.effects)
    assert (seen.result, seen.callers) == ({"id": "ch_1"}, 8)
    assert len(provider.calls()) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_called_from_threads_of_forked_processes_at_once_makes_one_effect(provider, settings):
    settings.RECEIPTS_MAX_WAITERS = 6  # every caller may wait for the first (the forks inherit it)
    seen = assert_runs_once_concurrently(charging(provider), threads=3, processes=2, effects=provider.effects)
    assert (seen.result, seen.callers, seen.refused) == ({"id": "ch_1"}, 6, 0)
    assert len(provider.calls()) == 1
    assert Receipt.objects.get().status == "completed"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("processes", [0, 2])
def test_a_step_without_a_claim_called_at_once_fails(provider, processes):
    with pytest.raises(AssertionError, match="effects, not 1"):
        assert_runs_once_concurrently(charging_every_time(provider), threads=2, processes=processes,
                                      effects=provider.effects)
    assert len(provider.calls()) == (4 if processes else 2)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_effects_counted_in_a_list_of_this_process_fail_with_a_hint_under_processes(provider):
    sent: list[int] = []  # each forked process appends to its own copy

    def charge() -> int:
        sent.append(1)
        return 1

    with pytest.raises(AssertionError, match="0 effects, not 1 .*a table, a file, a Provider"):
        assert_runs_once_concurrently(lambda: receipts.run_once("k", "payment.charge", charge), threads=1,
                                      processes=2, effects=lambda: len(sent))


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.receipts.testing_urls")
def test_an_idempotent_view_posted_from_threads_at_once_charges_once(provider, settings):
    settings.RECEIPTS_MAX_WAITERS = 1  # the rest are refused as in progress, which the helper allows
    seen = assert_runs_once_concurrently(post_charge(), threads=6, effects=provider.effects)
    assert seen.result == (201, b'{"charged": "42"}') and seen.callers == 6
    assert len(provider.calls()) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.receipts.testing_urls")
def test_a_view_that_ignores_the_key_posted_from_threads_at_once_fails(provider):
    with pytest.raises(AssertionError, match="3 effects, not 1"):
        assert_runs_once_concurrently(post_charge("/charge-every-time"), threads=3, effects=provider.effects)


@pytest.mark.django_db
def test_callers_on_other_connections_are_refused_in_a_test_that_runs_in_a_transaction(provider):
    with pytest.raises(RuntimeError, match=r"django_db\(transaction=True\)"):
        assert_runs_once_concurrently(charging(provider), effects=provider.effects)
    with pytest.raises(RuntimeError, match=r"django_db\(transaction=True\)"):
        assert_survives_crash_after_effect(charging(provider), provider)
    assert provider.calls() == []


# --- killed right after its effect ---------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_killed_after_its_effect_is_retried_with_the_key_it_sent(provider):
    crash = assert_survives_crash_after_effect(charging(provider), provider)
    first, retry = provider.calls()
    assert first["pid"] != os.getpid() and retry["pid"] == os.getpid()  # the first ran in the killed child
    assert first["claim"][3] == 1 and retry["claim"][3] == 2  # the retry took the dead attempt's lease over
    assert crash.keys == [first["idempotency_key"]] * 2 and crash.keys[0].startswith("idemdash-")
    assert crash.result == {"id": "ch_1"}
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("completed", 2)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.receipts.testing_urls")
def test_a_view_killed_after_its_effect_is_retried_with_the_key_it_sent(provider):
    crash = assert_survives_crash_after_effect(post_charge(), provider)
    assert len(set(crash.keys)) == 1 and len(crash.keys) == 2
    assert crash.result.status_code == 201


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_that_sends_the_provider_no_key_fails_after_a_crash(provider):
    def charge() -> dict:
        return provider()  # claimed, but the provider is not told the key

    with pytest.raises(AssertionError, match=r"\[None, None\] .*: 2 effects"):
        assert_survives_crash_after_effect(lambda: receipts.run_once("charge:1", "payment.charge", charge), provider)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_keyed_anew_on_every_attempt_fails_after_a_crash(provider):
    def charge() -> dict:
        return provider(idempotency_key=receipts.current().downstream_key)

    # A key from a random value, not the intent's inputs: the retry is another claim.
    with pytest.raises(AssertionError):
        assert_survives_crash_after_effect(lambda: receipts.run_once(f"charge:{uuid.uuid4()}", "payment.charge", charge),
                                           provider)
    assert len(set(provider.keys())) >= 2


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_called_outside_any_claim_fails_after_a_crash(provider):
    with pytest.raises(AssertionError, match="outside any claim"):
        assert_survives_crash_after_effect(charging_every_time(provider), provider)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_that_never_reaches_the_provider_fails_after_a_crash(provider):
    with pytest.raises(AssertionError, match="without calling the provider"):
        assert_survives_crash_after_effect(lambda: receipts.run_once("k", "payment.charge", lambda: 1), provider)


# --- held after a crash (after_crash "hold") ----------------------------------------------------

@pytest.fixture
def holding(settings):
    settings.RECEIPTS_OPERATIONS = {"payment.charge": {"after_crash": "hold"}}


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_held_step_killed_after_its_effect_is_outcome_unknown_until_resolved_and_then_replays(provider, holding):
    held = assert_held_after_crash(charging(provider), provider, retries=3)
    [call] = provider.calls()  # the killed attempt's, and no retry's
    assert call["pid"] != os.getpid() and held.downstream_key == call["idempotency_key"]
    assert held.receipt.outcome_unknown
    assert list(Attempt.objects.order_by("pk").values_list("outcome", flat=True)) == ["claimed"] + ["outcome_unknown"] * 3

    store.mark_completed(held.receipt, result='{"id": "ch_found"}', actor="test", reason="the provider has it")
    assert charging(provider)() == {"id": "ch_found"}
    assert len(provider.calls()) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.urls("tests.receipts.testing_urls")
def test_a_held_view_killed_after_its_effect_answers_409_outcome_unknown(provider, holding):
    held = assert_held_after_crash(post_charge(), provider)
    assert held.receipt.key == "order-42" and len(provider.calls()) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_step_that_runs_again_after_a_crash_fails_the_hold_assertion(provider):
    with pytest.raises(AssertionError, match=r'returned .*not outcome-unknown.*after_crash": "hold"'):
        assert_held_after_crash(charging(provider), provider)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_held_step_fails_the_rerun_assertion_naming_the_hold_helper(provider, holding):
    with pytest.raises(AssertionError, match="assert_held_after_crash"):
        assert_survives_crash_after_effect(charging(provider), provider)
    assert len(provider.calls()) == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_idempotency_fixture_asserts_the_hold_with_its_provider(idempotency, holding):
    held = idempotency.assert_held_after_crash(charging(idempotency.provider))
    assert held.receipt.outcome_unknown and idempotency.provider.effects() == 1


# --- the plugin's fixtures -----------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_isolated_receipts_starts_the_test_with_none_of_those_committed_before(provider, request):
    receipts.run_once("left-over", "payment.charge", lambda: 1)
    connections.close_all()
    assert Receipt.objects.count() == 1
    request.getfixturevalue("isolated_receipts")
    assert Receipt.objects.count() == 0
    assert testing.clear_receipts() == 0


def test_the_idempotency_fixture_counts_its_own_providers_effects(idempotency):
    def charge() -> dict:
        return idempotency.provider(idempotency_key=receipts.current().downstream_key)

    idempotency.assert_runs_once(lambda: receipts.run_once("charge:7", "payment.charge", charge), times=2)
    assert len(idempotency.provider.calls()) == 1
    with pytest.raises(AssertionError, match="2 effects"):
        idempotency.assert_runs_once(lambda: idempotency.provider())


@pytest.mark.slow
def test_the_plugin_imports_no_django_and_leaves_a_pytest_run_without_django_alone(tmp_path):
    imported = subprocess.run(
        [sys.executable, "-c", "import sys, receipts.pytest_plugin; print('django' in sys.modules)"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert imported.stdout.strip() == "False", imported.stderr
    (tmp_path / "test_plain.py").write_text(textwrap.dedent("""\
        def test_plain():
            assert 1 + 1 == 2
        """))
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_plain.py"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    listed = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--fixtures", "test_plain.py"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "isolated_receipts" in listed.stdout and "idempotency" in listed.stdout
