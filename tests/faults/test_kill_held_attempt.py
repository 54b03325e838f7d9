"""SIGKILL an attempt after its effect and before it settles, under `after_crash: "hold"`.

A real child process runs a decorated view (receipts/decorators.py) that sends "an email":
it appends the claim's downstream key to a provider file, the effect outside the database,
and is then killed with SIGKILL by this process before the view returns, so its receipt
never settles. Once the lease has run out, the next attempt does not run: in process
(store.claim) and over HTTP through the decorator it is answered outcome-unknown, and the
provider has one effect. Then the operation's reconcile function, which asks the provider by
the downstream key, finds the effect, the receipt is completed with its answer, and the retry
replays it: still one effect. A second key whose attempt was killed before its effect is run
again by an operator (store.run_again), and its next attempt runs: one effect.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest
import receipts
from django.db import connections
from django.http import HttpRequest, JsonResponse
from django.test import Client
from django.urls import path
from django.utils import timezone

from receipts import store
from receipts.decorators import idempotent
from receipts.downstream import downstream_key
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt

pytestmark = pytest.mark.slow

SCOPE = "client:held"
OPERATION = "email.send"
LEASE = 1
PROVIDER = "IDEMDASH_TEST_HELD_PROVIDER"
# Set (in the forked child) once its effect is written: the test then kills it.
_effect_done = None


def _sent() -> list[str]:
    """The downstream keys the provider has seen, one line per effect."""
    provider = Path(os.environ[PROVIDER])
    return provider.read_text().split() if provider.exists() else []


@idempotent(OPERATION, scope=lambda request: SCOPE)
def send_email(request: HttpRequest) -> JsonResponse:
    # How this test drives the attempt is in headers, outside the fingerprinted request.
    if request.headers.get("X-Test-Effect", "yes") == "yes":
        sent_as = receipts.current().downstream_key  # what the provider gets as Idempotency-Key
        with open(os.environ[PROVIDER], "a") as provider:  # the provider's own record
            provider.write(sent_as + "\n")
            provider.flush()
            os.fsync(provider.fileno())
    if request.headers.get("X-Test-Die"):
        _effect_done.set()  # the test kills us now
        time.sleep(60)
    return JsonResponse({"sent": True}, status=201)


urlpatterns = [path("send/", send_email)]


def reconcile(unsettled: store.Unsettled):
    """Ask the provider, by the downstream key, whether the email went out."""
    if unsettled.downstream_key in _sent():
        return {"sent": True, "found_by": "reconcile"}
    return store.NOT_DONE


def _post(key: str, *, effect: bool = True, die: bool = False) -> object:
    headers = {"Idempotency-Key": key, "X-Test-Effect": "yes" if effect else "no"}
    if die:
        headers["X-Test-Die"] = "yes"
    return Client().post("/send/", data=json.dumps({"to": "lead@example.test"}), content_type="application/json",
                         headers=headers)


def _attempt_then_sigkill(key: str, effect: bool) -> None:
    """A child process's request that is killed with SIGKILL inside the view, after its effect
    (when `effect`), before the decorator settles the receipt."""
    global _effect_done
    connections.close_all()  # the child must not share the parent's connection
    ctx = multiprocessing.get_context("fork")
    _effect_done = ctx.Event()
    child = ctx.Process(target=_post, args=(key,), kwargs={"effect": effect, "die": True})
    child.start()
    try:
        assert _effect_done.wait(30), "the child never reached its effect"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(10)
        if child.exitcode is None:
            child.kill()
    assert child.exitcode == -signal.SIGKILL
    # The lease it held runs out: the test holds the clock, it does not wait for it.
    Receipt.objects.filter(scope=SCOPE, key=key).update(lease_expires_at=timezone.now() - timedelta(seconds=1))


@pytest.fixture
def held(settings, tmp_path, monkeypatch):
    monkeypatch.setenv(PROVIDER, str(tmp_path / "provider.log"))
    settings.RECEIPTS_OPERATIONS = {OPERATION: {"after_crash": "hold", "lease_seconds": LEASE}}
    return settings


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_an_attempt_killed_after_its_effect_is_held_until_reconcile_finds_the_effect(held):
    _attempt_then_sigkill("welcome-1", effect=True)
    receipt = Receipt.objects.get(scope=SCOPE, key="welcome-1")
    assert receipt.status == "processing" and receipt.outcome_unknown
    assert _sent() == [downstream_key(SCOPE, "welcome-1", receipt.created_at)]

    in_process = store.claim(SCOPE, "welcome-1", OPERATION, fingerprint=receipt.fingerprint)
    assert in_process.outcome == "outcome_unknown" and not in_process.owned
    over_http = _post("welcome-1")
    assert over_http.status_code == 409
    assert over_http["Content-Type"] == "application/problem+json"
    assert over_http.json()["type"] == "urn:idemdash:problem:outcome-unknown"
    assert "Retry-After" not in over_http
    assert len(_sent()) == 1, "a held attempt ran again"
    assert Receipt.objects.get(pk=receipt.pk).fencing_token == receipt.fencing_token  # nothing took it over

    held.RECEIPTS_OPERATIONS = {OPERATION: {
        "after_crash": "hold", "lease_seconds": LEASE, "reconcile": f"{__name__}.reconcile",
    }}
    replay = _post("welcome-1")
    assert replay.status_code == 200 and replay["Idempotent-Replayed"] == "true"
    assert replay.json() == {"sent": True, "found_by": "reconcile"}
    again = _post("welcome-1")
    assert again.json() == {"sent": True, "found_by": "reconcile"} and again["Idempotent-Replayed"] == "true"
    assert len(_sent()) == 1
    receipt.refresh_from_db()
    assert receipt.status == "completed" and not receipt.outcome_unknown
    outcomes = list(Attempt.objects.filter(scope=SCOPE, key="welcome-1").order_by("id").values_list("outcome", flat=True))
    assert outcomes == ["claimed", "outcome_unknown", "outcome_unknown", "completed", "replayed", "replayed"]


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_an_operator_runs_again_an_attempt_killed_before_its_effect(held):
    _attempt_then_sigkill("welcome-2", effect=False)
    assert _post("welcome-2").status_code == 409
    assert _sent() == []

    store.run_again(Receipt.objects.get(scope=SCOPE, key="welcome-2"), actor="otto", reason="no email at the provider")
    ran = _post("welcome-2")
    assert ran.status_code == 201 and "Idempotent-Replayed" not in ran
    assert _post("welcome-2")["Idempotent-Replayed"] == "true"
    receipt = Receipt.objects.get(scope=SCOPE, key="welcome-2")
    assert _sent() == [downstream_key(SCOPE, "welcome-2", receipt.created_at)]
    assert AuditEntry.objects.filter(action="receipt.run_again", actor="otto").count() == 1


@pytest.mark.urls(__name__)
@pytest.mark.django_db(transaction=True)
def test_reconcile_that_finds_nothing_lets_the_next_attempt_run(held):
    held.RECEIPTS_OPERATIONS = {OPERATION: {
        "after_crash": "hold", "lease_seconds": LEASE, "reconcile": f"{__name__}.reconcile",
    }}
    _attempt_then_sigkill("welcome-3", effect=False)
    ran = _post("welcome-3")
    assert ran.status_code == 201
    assert len(_sent()) == 1
    assert Attempt.objects.filter(scope=SCOPE, key="welcome-3", outcome="lease_takeover").count() == 1
