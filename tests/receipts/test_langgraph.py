"""The LangGraph recipe (docs/agents-and-workers.md, "LangGraph") with the real framework, no
model and no network: a three-node workflow (source the lead, enrich it, send the follow-up)
whose send node makes its effect with receipts.run_once and hands the claim's downstream key
to the email provider. LangGraph's RetryPolicy re-runs the node after a timeout that comes
after the send, and a kill -9 right after the send is followed by a restart from the
SqliteSaver checkpoint: the provider gets one distinct key each time, so one email. And the
retry_on predicate (receipts/langgraph.py) retries what is worth it and not a IdempotencyKeyReused,
a PreviousFailure or an OutcomeUnknown."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import RetryPolicy

import receipts
import receipts.langgraph
from idemdash_client import errors
from receipts.models import Attempt, Receipt
from tests.concurrently import killed_once_it_reaches
from tests.packaging.host import run
from tests.receipts.recipes import recipe

ROOT = Path(__file__).resolve().parents[2]


class EmailProvider:
    """An email API that honours Idempotency-Key: a request with a key it has seen sends no
    second email. Every request is a line in a file, so forked workers share one provider.
    `timeouts` answers that many requests with a timeout after the email went out; `hang`
    makes a request that sent its email never return (the worker is killed there)."""

    def __init__(self, path: Path, *, timeouts: int = 0, hang: Path | None = None) -> None:
        self.path, self.timeouts, self.hang = path, timeouts, hang

    def send(self, *, to: str, subject: str, idempotency_key: str) -> str:
        with self.path.open("a") as log:
            log.write(json.dumps({"to": to, "subject": subject, "idempotency_key": idempotency_key}) + "\n")
        if self.hang is not None:
            self.hang.touch()
            time.sleep(60)
        if self.timeouts:
            self.timeouts -= 1
            raise TimeoutError("the provider's answer timed out")
        return f"msg-{idempotency_key[-8:]}"

    def requests(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines()] if self.path.exists() else []

    def emails(self) -> int:
        return len({request["idempotency_key"] for request in self.requests()})


class Crm:
    """The CRM and the enrichment service the first two nodes call, writing each call to a
    file (forked workers share it), so a test sees which nodes ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def find_lead(self, lead_id: str) -> dict:
        self._called("source_lead")
        return {"email": f"{lead_id}@example.com", "name": "Ada"}

    def company_of(self, email: str) -> dict:
        self._called("enrich")
        return {"name": "Acme", "domain": email.split("@")[1]}

    def _called(self, node: str) -> None:
        with self.path.open("a") as log:
            log.write(node + "\n")

    def calls(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


def follow_up_graph(checkpointer, crm: Crm, email_api: EmailProvider):
    """The page's recipe, run as written, with these services for its names."""
    return recipe("langgraph", crm=crm, enrichment=crm, email_api=email_api).follow_up_graph(checkpointer)


# --- the predicate ---------------------------------------------------------------------------

def problem(kind: str) -> dict:
    return {"type": f"urn:idemdash:problem:{kind}", "title": kind}


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (errors.IdempotencyKeyReused(422, problem("idempotency-key-reused")), False),
        (errors.PreviousFailure.failed("charge:1", "RuntimeError: declined", None), False),
        (errors.RequestInProgress(409, problem("request-in-progress"), 1), True),
        (errors.StaleToken(409, problem("stale-token")), True),
        (errors.ApiError(500, problem("server-error")), True),
        (errors.ApiError(400, problem("invalid-key")), False),
        (TimeoutError("read timed out"), True),
        (ConnectionError("refused"), True),
        (httpx.ReadTimeout("read timed out"), True),
        (ValueError("a bug"), False),
    ],
)
def test_retry_on_retries_what_a_claim_makes_safe_and_not_what_no_retry_can_fix(error, retried):
    assert receipts.langgraph.retry_on(error) is retried


def test_retry_on_differs_from_langgraphs_default_where_a_claim_changes_the_answer():
    default = RetryPolicy().retry_on
    mismatch = errors.IdempotencyKeyReused(422, problem("idempotency-key-reused"))
    assert (default(mismatch), receipts.langgraph.retry_on(mismatch)) == (True, False)
    assert (default(TimeoutError()), receipts.langgraph.retry_on(TimeoutError())) == (False, True)


@pytest.mark.slow
def test_retry_on_imports_neither_langgraph_nor_django_until_it_asks_langgraphs_default():
    code = (
        "import sys\n"
        "sys.modules['django'] = sys.modules['langgraph'] = None  # importing them now raises ImportError\n"
        "from idemdash_client import errors\nfrom receipts import langgraph\n"
        "assert langgraph.retry_on(errors.IdempotencyKeyReused(422, {})) is False\n"
        "assert langgraph.retry_on(TimeoutError()) is True\n"
        "print('ok')\n"
    )
    assert run(sys.executable, "-c", code, cwd=ROOT).strip() == "ok"


def test_retry_on_refuses_an_outcome_unknown():
    # after_crash "hold": the outcome waits for a reconcile or an operator, not for a retry.
    assert receipts.langgraph.retry_on(errors.OutcomeUnknown(409, problem("outcome-unknown"))) is False


# --- the workflow ------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_timeout_after_the_send_is_retried_by_langgraph_and_the_provider_sends_one_email(tmp_path):
    crm, provider = Crm(tmp_path / "crm.log"), EmailProvider(tmp_path / "provider.log", timeouts=1)
    graph = follow_up_graph(InMemorySaver(), crm, provider)
    config = {"configurable": {"thread_id": "campaign-1"}}

    final = graph.invoke({"lead_id": "lead-7"}, config)

    requests = provider.requests()
    assert len(requests) == 2  # the send, and the retry LangGraph made after its timeout
    assert provider.emails() == 1  # one key: the provider sent one email
    assert final["message_id"] == f"msg-{requests[0]['idempotency_key'][-8:]}"
    assert crm.calls() == ["source_lead", "enrich"]
    receipt = Receipt.objects.get()
    assert (receipt.key, receipt.status, receipt.attempts) == ("follow-up:campaign-1:lead-7", "completed", 2)

    # The workflow started again on the same thread: the send is replayed, nothing is sent.
    again = graph.invoke({"lead_id": "lead-7"}, config)
    assert again["message_id"] == final["message_id"]
    assert len(provider.requests()) == 2
    assert Attempt.objects.filter(outcome="replayed").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_key_mismatch_in_the_send_node_is_not_retried_by_langgraph(tmp_path):
    crm, provider = Crm(tmp_path / "crm.log"), EmailProvider(tmp_path / "provider.log")
    # The key was taken before for another recipient: a bug in how keys are made.
    receipts.run_once("follow-up:campaign-1:lead-7", "email.send", lambda: "msg-0", request={"to": "someone@else"})
    graph = follow_up_graph(InMemorySaver(), crm, provider)

    with pytest.raises(receipts.IdempotencyKeyReused):
        graph.invoke({"lead_id": "lead-7"}, {"configurable": {"thread_id": "campaign-1"}})

    assert Attempt.objects.filter(outcome="mismatch").count() == 1  # the node ran once: no retry
    assert provider.requests() == []


def _worker_killed_after_the_send(checkpoints: str, crm_log: str, provider_log: str, hang: str) -> None:
    """A worker process running the workflow until its email went out, then killed there."""
    provider = EmailProvider(Path(provider_log), hang=Path(hang))
    checkpointer = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    graph = follow_up_graph(checkpointer, Crm(Path(crm_log)), provider)
    graph.invoke({"lead_id": "lead-7"}, {"configurable": {"thread_id": "campaign-1"}}, durability="sync")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_after_the_send_and_restarted_from_its_checkpoint_sends_one_email(tmp_path, settings):
    # A short lease, so the restart takes the dead attempt's key over in a second (the
    # forked worker inherits the setting).
    settings.RECEIPTS_OPERATIONS = {"email.send": {"lease_seconds": 1}}
    checkpoints, crm_log = tmp_path / "checkpoints.sqlite", tmp_path / "crm.log"
    provider_log, hang = tmp_path / "provider.log", tmp_path / "sent"
    worker_args = (str(checkpoints), str(crm_log), str(provider_log), str(hang))
    killed_once_it_reaches(_worker_killed_after_the_send, worker_args, hang)
    assert Receipt.objects.get().status == "processing"  # never settled

    # The restart: a new checkpointer on the same file, a new graph, resumed where it stopped.
    crm, provider = Crm(crm_log), EmailProvider(provider_log)
    with SqliteSaver.from_conn_string(str(checkpoints)) as checkpointer:
        graph = follow_up_graph(checkpointer, crm, provider)
        config = {"configurable": {"thread_id": "campaign-1"}}
        assert graph.get_state(config).next == ("send_email",)
        final = graph.invoke(None, config, durability="sync")

    requests = provider.requests()
    assert len(requests) == 2 and provider.emails() == 1  # two requests, one key: one email
    assert final["message_id"] == f"msg-{requests[0]['idempotency_key'][-8:]}"
    assert crm.calls() == ["source_lead", "enrich"]  # from the checkpoint: not run again
    receipt = Receipt.objects.get()
    assert (receipt.status, receipt.attempts) == ("completed", 2)
    assert Attempt.objects.filter(outcome="lease_takeover").count() == 1


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_under_hold_a_restart_after_a_kill_after_the_send_stops_with_outcome_unknown_until_an_operator_resolves_it(
    tmp_path, settings
):
    from receipts.operator_actions import MARK_COMPLETED

    settings.RECEIPTS_OPERATIONS = {"email.send": {"lease_seconds": 1, "after_crash": "hold"}}
    checkpoints, crm_log = tmp_path / "checkpoints.sqlite", tmp_path / "crm.log"
    provider_log, hang = tmp_path / "provider.log", tmp_path / "sent"
    worker_args = (str(checkpoints), str(crm_log), str(provider_log), str(hang))
    killed_once_it_reaches(_worker_killed_after_the_send, worker_args, hang)
    # The dead attempt's lease runs out: the test holds the clock rather than wait a second.
    Receipt.objects.filter(status="processing").update(lease_expires_at=timezone.now() - timedelta(seconds=1))

    crm, provider = Crm(crm_log), EmailProvider(provider_log)
    config = {"configurable": {"thread_id": "campaign-1"}}
    with SqliteSaver.from_conn_string(str(checkpoints)) as checkpointer:
        graph = follow_up_graph(checkpointer, crm, provider)
        # The graph stops with it: retry_on refuses OutcomeUnknown, so the node ran once.
        with pytest.raises(receipts.OutcomeUnknown):
            graph.invoke(None, config, durability="sync")
        assert graph.get_state(config).next == ("send_email",)
        assert Attempt.objects.filter(outcome="outcome_unknown").count() == 1
        assert len(provider.requests()) == 1  # the provider was called once: by the killed worker

        # The operator finds the email at the provider, by the downstream key, and marks it sent.
        [sent] = provider.requests()
        MARK_COMPLETED.run(Receipt.objects.get(), actor="otto", user=None, reason=sent["idempotency_key"],
                           result='"msg-found"')
        final = graph.invoke(None, config, durability="sync")

    assert final["message_id"] == "msg-found"  # replayed: the workflow ends without sending again
    assert len(provider.requests()) == 1
    assert crm.calls() == ["source_lead", "enrich"]
