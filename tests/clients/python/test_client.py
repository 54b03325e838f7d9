"""The sync client (idemdash_client/client.py) against a live server."""

from __future__ import annotations

import subprocess
import threading
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from idemdash.core.clients import create_token
from idemdash_client import (
    FreshKeyRetry,
    ApiError,
    IdempotencyClient,
    RequestInProgress,
    InvalidReference,
    IdempotencyKeyReused,
    StaleToken,
    OutcomeUnknown,
    PreviousFailure,
    current,
    make_key,
)
from idemdash.devtools.examples.agent_workflow import Steps, run_workflow
from receipts import store
from receipts.models import Attempt, Receipt

ROOT = Path(__file__).resolve().parents[3]


# --- no Django ------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_client_imports_without_django():
    code = (
        "import sys\n"
        "sys.modules['django'] = None  # any `import django...` now raises ImportError\n"
        "import idemdash_client, idemdash_client.aio\n"
        "import idemdash.devtools.examples.agent_workflow\n"
        "loaded = [m for m in sys.modules if m == 'django' or m.startswith('django.')]\n"
        "assert loaded == ['django'], loaded\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --- against a live server ---------------------------------------------------------------------

@pytest.fixture
def idem(live_server, transactional_db):
    _, token = create_token("agent")
    with IdempotencyClient(live_server.url, token, wait_seconds=0) as idem:
        yield idem


def test_claim_complete_and_replay(idem):
    claim = idem.claim("k", "email.send", {"to": "a"})
    assert claim.outcome == "claimed" and claim.token == 1 and not claim.replayed
    idem.complete("k", claim.token, {"id": 7})
    again = idem.claim("k", "email.send", {"to": "a"})
    assert again.replayed and again.status == "completed" and again.response == {"id": 7}
    assert idem.get("k")["status"] == "completed"
    assert idem.get("unknown") is None


def test_a_held_key_raises_in_progress_with_retry_after(idem):
    idem.claim("k", "email.send")
    with pytest.raises(RequestInProgress) as caught:
        idem.claim("k", "email.send")
    assert caught.value.status == 409 and 1 <= caught.value.retry_after <= 10


def test_another_request_under_a_key_raises_key_mismatch(idem):
    idem.claim("k", "email.send", {"to": "a"})
    with pytest.raises(IdempotencyKeyReused) as caught:
        idem.claim("k", "email.send", {"to": "b"})
    assert caught.value.status == 422


def test_run_once_makes_the_claim_current_with_the_downstream_key_the_server_handed_out(idem):
    import receipts
    from receipts.downstream import downstream_key

    seen = []
    assert idem.run_once("k", "email.send", lambda: seen.append(receipts.current()) or "sent") == "sent"
    assert receipts.current() is None
    [claim] = seen
    receipt = Receipt.objects.get(key="k")
    assert (claim.key, claim.scope, claim.operation, claim.attempt) == ("k", "client:agent", "email.send", 1)
    assert claim.fencing_token == receipt.fencing_token
    assert claim.downstream_key == downstream_key("client:agent", "k", receipt.created_at)


def test_a_stale_token_raises_lease_lost(idem):
    claim = idem.claim("k", "email.send")
    idem.complete("k", claim.token, 1)
    with pytest.raises(StaleToken):
        idem.complete("k", claim.token, 2)


def test_a_bad_token_raises_api_error_with_the_problem(live_server, transactional_db):
    with IdempotencyClient(live_server.url, "idem_wrong") as idem:
        with pytest.raises(ApiError) as caught:
            idem.claim("k", "email.send")
    assert caught.value.status == 401
    assert caught.value.type == "urn:idemdash:problem:unauthorized"
    assert caught.value.problem["title"]


def test_run_once_runs_fn_once_and_replays_its_result(idem):
    calls = []

    def send(to: str) -> dict:
        calls.append(to)
        return {"sent": to}

    assert idem.run_once("k", "email.send", send, "a@example.com", request={"to": "a"}) == {"sent": "a@example.com"}
    assert idem.run_once("k", "email.send", send, "a@example.com", request={"to": "a"}) == {"sent": "a@example.com"}
    assert calls == ["a@example.com"]


def test_run_once_fails_the_receipt_on_an_exception_and_the_next_run_retries(idem):
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("smtp down")
        return "ok"

    with pytest.raises(ConnectionError):
        idem.run_once("k", "email.send", flaky)
    assert Receipt.objects.get().status == "failed"
    assert Receipt.objects.get().error == "ConnectionError: smtp down"
    assert idem.run_once("k", "email.send", flaky) == "ok"
    assert len(calls) == 2


def test_run_once_raises_previous_failure_for_a_burned_key(idem, settings):
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}

    def post() -> None:
        raise ValueError("rejected")

    with pytest.raises(ValueError):
        idem.run_once("k", "ledger.post", post)
    with pytest.raises(PreviousFailure) as caught:
        idem.run_once("k", "ledger.post", post)
    assert caught.value.error == "ValueError: rejected"


def test_run_once_refuses_a_result_it_cannot_store_and_fails_the_receipt(idem):
    with pytest.raises(TypeError):
        idem.run_once("k", "email.send", lambda: object())
    assert Receipt.objects.get().status == "failed"


def test_run_once_waits_out_a_held_key_honouring_retry_after(idem, settings):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    idem.claim("k", "email.send", lease_seconds=1)  # a worker that then died
    assert idem.run_once("k", "email.send", lambda: "mine") == "mine"
    assert Receipt.objects.get().attempts == 2  # taken over after the lease ran out


def test_run_once_gives_up_after_its_retries(live_server, transactional_db):
    _, token = create_token("impatient")
    with IdempotencyClient(live_server.url, token, wait_seconds=0, max_in_progress_retries=0) as idem:
        idem.claim("k", "email.send")
        with pytest.raises(RequestInProgress):
            idem.run_once("k", "email.send", lambda: "never")


def test_run_once_raises_lease_lost_when_a_heartbeat_is_refused_and_stores_nothing(idem, settings, monkeypatch):
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # a beat every third of a second, so the first comes soon
    refused = threading.Event()
    beat = IdempotencyClient.heartbeat

    def heartbeat(self, key, token, *, lease_seconds=None, timeout=None):
        # Each beat is answered however loaded the machine (a beat's own timeout, a third of
        # the lease, is test_run_once_renews_its_lease_...'s); the step waits for the refusal.
        try:
            return beat(self, key, token, lease_seconds=lease_seconds, timeout=30)
        except StaleToken:
            refused.set()
            raise

    monkeypatch.setattr(IdempotencyClient, "heartbeat", heartbeat)

    def step() -> str:
        store.release(Receipt.objects.get(), actor="otto", reason="looked stuck")  # an operator, mid-step
        assert refused.wait(30), "no heartbeat was refused"
        return "late"

    with pytest.raises(StaleToken):
        idem.run_once("k", "report.build", step, lease_seconds=1)
    receipt = Receipt.objects.get()
    assert receipt.status == "failed" and receipt.released
    log = list(Attempt.objects.order_by("id").values_list("outcome", "detail"))
    # One refused heartbeat; no completion was even tried (it would have logged a second one).
    assert [outcome for outcome, _ in log] == ["claimed", "released", "stale_token"]
    assert "heartbeat" in log[-1][1]


class _FirstHeartbeatUnanswered(httpx.HTTPTransport):
    """A real transport to the live server that counts heartbeats; given `silent_port`, the
    first goes there, to a listener that never answers (a server stuck behind a full queue)."""

    def __init__(self, silent_port: int | None) -> None:
        super().__init__()
        self.silent_port = silent_port
        self.heartbeats = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/heartbeat"):
            self.heartbeats += 1
            if self.heartbeats == 1 and self.silent_port:
                request = httpx.Request(request.method, request.url.copy_with(port=self.silent_port),
                                        headers=request.headers, content=request.read(), extensions=request.extensions)
        return super().handle_request(request)


@pytest.mark.slow
@pytest.mark.parametrize("first_beat", ["answered", "unanswered"])
def test_run_once_renews_its_lease_while_a_step_longer_than_the_lease_runs(
    live_server, transactional_db, settings, silent_port, first_beat
):
    """Unanswered: sent with the client's 10 s timeout and its retries, that heartbeat held the
    beats back past the lease, and another worker took the key over mid-step. Each beat is
    given up after a beat's length, and the next keeps the lease."""
    settings.RECEIPTS_MIN_LEASE_SECONDS = 1  # short leases, so the test need not wait 15 s
    _, token = create_token("slow-step")
    transport = _FirstHeartbeatUnanswered(silent_port if first_beat == "unanswered" else None)
    seen = []
    with IdempotencyClient(live_server.url, token, wait_seconds=0, transport=transport) as idem, \
            IdempotencyClient(live_server.url, token, wait_seconds=0, max_in_progress_retries=0) as other:

        def build() -> str:
            for _ in range(9):  # 4.5 s under a 3 s lease
                time.sleep(0.5)
                try:
                    seen.append(other.claim("k", "report.build").outcome)
                except RequestInProgress:
                    seen.append("in_progress")
            return "built"

        assert idem.run_once("k", "report.build", build, lease_seconds=3) == "built"
    assert seen == ["in_progress"] * 9 and transport.heartbeats >= 3
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts, receipt.response_body) == ("completed", 1, '"built"')
    assert not Attempt.objects.filter(outcome__in=["lease_takeover", "stale_token"]).exists()


class _DropsFirstConnections(httpx.HTTPTransport):
    """A real transport to the live server whose first `drops` requests never connect."""

    def __init__(self, drops: int) -> None:
        super().__init__()
        self.drops = drops
        self.sent: list[str] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.url.path)
        if self.drops:
            self.drops -= 1
            raise httpx.ConnectError("connection refused", request=request)
        return super().handle_request(request)


def test_a_connection_that_fails_is_retried_and_the_work_runs_once(live_server, transactional_db):
    _, token = create_token("flaky-network")
    transport = _DropsFirstConnections(drops=2)
    calls = []
    with IdempotencyClient(live_server.url, token, wait_seconds=0, transport=transport, max_backoff=0.05) as idem:
        assert idem.run_once("k", "email.send", lambda: calls.append(1) or "sent") == "sent"
    assert calls == [1]
    assert transport.sent == ["/api/v1/receipts/claim"] * 3 + ["/api/v1/receipts/complete"]
    assert Receipt.objects.get().status == "completed"


def test_retries_are_bounded_and_the_last_error_is_raised(live_server, transactional_db):
    _, token = create_token("dead-network")
    transport = _DropsFirstConnections(drops=10)
    with IdempotencyClient(
        live_server.url, token, transport=transport, max_unavailable_retries=2, max_backoff=0.01
    ) as idem:
        with pytest.raises(httpx.ConnectError):
            idem.claim("k", "email.send")
    assert len(transport.sent) == 3
    assert not Receipt.objects.exists()


def test_the_once_decorator_keys_calls_by_their_arguments(idem):
    sent = []

    @idem.once("email.send", key=lambda lead, template: make_key("email", lead, template))
    def send_email(lead: str, template: str) -> str:
        sent.append((lead, template))
        return f"{template}->{lead}"

    assert send_email("lead-1", "welcome") == "welcome->lead-1"
    assert send_email("lead-1", "welcome") == "welcome->lead-1"
    assert send_email("lead-2", "welcome") == "welcome->lead-2"
    assert sent == [("lead-1", "welcome"), ("lead-2", "welcome")]
    assert send_email.__name__ == "send_email"


def test_the_server_side_wait_returns_the_first_attempts_result(live_server, transactional_db):
    _, token = create_token("patient")
    with IdempotencyClient(live_server.url, token, wait_seconds=5) as idem:
        first = idem.claim("k", "email.send")


        finisher = threading.Timer(0.3, lambda: idem.complete("k", first.token, "done"))
        finisher.start()
        again = idem.claim("k", "email.send")
        finisher.join()
    assert again.replayed and again.response == "done"


# --- the agent workflow of docs/json-api.md -------------------------------------------------------

class CountingSteps(Steps):
    def __init__(self, crash_on_send: bool) -> None:
        self.calls: list[str] = []
        self.crash_on_send = crash_on_send

    def source_lead(self, query: str) -> dict:
        self.calls.append("source")
        return super().source_lead(query)

    def enrich(self, lead: dict) -> dict:
        self.calls.append("enrich")
        return super().enrich(lead)

    def send_email(self, lead: dict, template: str) -> dict:
        self.calls.append("send")
        if self.crash_on_send:
            raise RuntimeError("agent crashed while sending")
        return super().send_email(lead, template)


def test_the_agent_workflow_resumes_after_a_crash_without_repeating_finished_steps(idem):
    first_run = CountingSteps(crash_on_send=True)
    with pytest.raises(RuntimeError, match="crashed"):
        run_workflow(idem, "spring", "rust consultancies in lyon", first_run)
    assert first_run.calls == ["source", "enrich", "send"]

    second_run = CountingSteps(crash_on_send=False)
    result = run_workflow(idem, "spring", "rust consultancies in lyon", second_run)
    assert second_run.calls == ["send"]  # steps 1 and 2 replayed from their receipts
    assert result["message_id"].startswith("welcome-")

    third_run = CountingSteps(crash_on_send=False)
    assert run_workflow(idem, "spring", "rust consultancies in lyon", third_run) == result
    assert third_run.calls == []
    assert dict(Receipt.objects.values_list("operation", "attempts")) == {
        "lead.source": 1,
        "lead.enrich": 1,
        "email.send": 2,
    }


def test_a_held_key_raises_outcome_unknown_and_runs_nothing(idem, settings):
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    idem.claim("held", "email.send", {"to": "a"}, lease_seconds=15)
    Receipt.objects.filter(key="held").update(lease_expires_at=timezone.now() - timedelta(seconds=1))  # the worker died
    ran = []
    with pytest.raises(OutcomeUnknown) as caught:
        idem.run_once("held", "email.send", ran.append, 1, request={"to": "a"})
    assert caught.value.status == 409 and caught.value.type == "urn:idemdash:problem:outcome-unknown"
    assert ran == []


def test_the_same_request_under_a_new_key_raises_fresh_key_retry_naming_the_first_key(idem, settings):
    settings.RECEIPTS_OPERATIONS = {"refund.create": {"fresh_key": "refuse"}}
    ran = []
    idem.run_once("refund-1", "refund.create", ran.append, 1, request={"order": 7})
    with pytest.raises(FreshKeyRetry) as caught:  # not retried: a new key would only be refused again
        idem.run_once("refund-1-again", "refund.create", ran.append, 2, request={"order": 7})
    assert caught.value.status == 409 and caught.value.first_key == "refund-1" and ran == [1]


def test_the_agents_pages_http_recipe_runs_a_send_again_under_the_same_downstream_key_then_replays(idem):
    from tests.receipts.recipes import recipe

    class EmailApi:
        """Records each request's key; the first answer times out after the email went out."""

        def __init__(self) -> None:
            self.keys: list[str] = []

        def send(self, *, to: str, subject: str, idempotency_key: str) -> str:
            self.keys.append(idempotency_key)
            if len(self.keys) == 1:
                raise TimeoutError("the provider's answer timed out")
            return f"msg-{len(self.keys)}"

    provider = EmailApi()
    page = recipe("http", email_api=provider)
    with pytest.raises(TimeoutError):
        page.send_welcome(idem, 42, "ada@example.com")
    assert page.send_welcome(idem, 42, "ada@example.com") == {"message_id": "msg-2"}
    assert page.send_welcome(idem, 42, "ada@example.com") == {"message_id": "msg-2"}  # replayed
    assert len(provider.keys) == 2 and len(set(provider.keys)) == 1  # one key: one email
    assert provider.keys[0].startswith("idemdash-")
    receipt = Receipt.objects.get(key=make_key("welcome", 42))
    assert (receipt.scope, receipt.status, receipt.attempts) == ("client:agent", "completed", 2)


# --- references ----------------------------------------------------------------------------------

def _stored_references(key: str) -> list[tuple[str, str]]:
    return list(Receipt.objects.get(key=key).references.order_by("pk").values_list("kind", "value"))


def test_complete_and_fail_store_references_as_the_json_api_does(idem):
    claim = idem.claim("charge-1", "payment.charge")
    idem.complete("charge-1", claim.token, {"ok": True}, references=[("stripe.charge", "ch_1"), {"kind": "order", "value": 7}])
    assert _stored_references("charge-1") == [("stripe.charge", "ch_1"), ("order", "7")]
    assert idem.get("charge-1")["references"] == [{"kind": "stripe.charge", "value": "ch_1"}, {"kind": "order", "value": "7"}]
    claim = idem.claim("charge-2", "payment.charge")
    idem.fail("charge-2", claim.token, "declined", references=[("stripe.charge", "ch_2")])
    assert _stored_references("charge-2") == [("stripe.charge", "ch_2")]


def test_a_bad_reference_is_refused_before_anything_is_sent(idem):
    claim = idem.claim("k", "email.send")
    with pytest.raises(InvalidReference) as caught:
        idem.complete("k", claim.token, {}, references=[("Not A Kind", "x")])
    assert caught.value.field == "kind"
    assert Receipt.objects.get(key="k").status == "processing"  # nothing reached the server


def test_run_once_sends_what_fn_referred_to_with_its_completion_and_its_failure(idem):
    def charge() -> dict:
        current().refer("stripe.charge", "ch_ok")
        return {"ok": True}

    def declined() -> None:
        current().refer("stripe.charge", "ch_declined")
        raise RuntimeError("card declined")

    idem.run_once("charge-ok", "payment.charge", charge)
    with pytest.raises(RuntimeError):
        idem.run_once("charge-bad", "payment.charge", declined)
    assert _stored_references("charge-ok") == [("stripe.charge", "ch_ok")]
    assert _stored_references("charge-bad") == [("stripe.charge", "ch_declined")]
