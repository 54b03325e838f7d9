"""The OpenAI Agents SDK recipe (docs/agents-and-workers.md, "OpenAI Agents SDK") with the real
Runner and no model or network: a model of our own (the SDK's Model interface, as the SDK's
own tests drive the Runner) emits the same `send_email` tool call twice in one response and
again in a later turn; the function tool runs its effect with receipts.arun_once under
tool_call_key(run id, tool name, arguments), so the run makes one effect, and a new run (a
new run id) makes its own. Tracing is off, and any attempt to reach another host fails the
test."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from asgiref.sync import async_to_sync
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from idemdash_client import tool_call_key
from receipts.models import Attempt, Receipt
from tests.receipts.recipes import recipe

LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def no_network(monkeypatch) -> Iterator[list]:
    """A dummy API key, tracing off (the SDK exports traces to OpenAI by default), and every
    connection or name lookup for a host other than this machine refused and recorded."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-key")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
    set_tracing_disabled(True)
    reached: list = []
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def connect(sock, address):
        if isinstance(address, tuple) and address[0] not in LOOPBACK:
            reached.append(address)
            raise OSError(f"the test tried to reach {address}")
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in LOOPBACK and host is not None:
            reached.append(host)
            raise OSError(f"the test tried to look up {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield reached
    set_tracing_disabled(False)
    assert reached == []


class ScriptedModel(Model):
    """A model that answers each turn with the next scripted output, as the SDK's own tests'
    FakeModel does; no client, no network."""

    def __init__(self, turns: list[list]) -> None:
        self.turns = list(turns)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self.turns.pop(0), usage=Usage(), response_id=None)

    async def stream_response(self, *args: Any, **kwargs: Any):  # pragma: no cover - not streamed here
        raise NotImplementedError
        yield


def call(call_id: str, arguments: dict) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc-{call_id}", call_id=call_id, type="function_call", name="send_email", arguments=json.dumps(arguments)
    )


def reply(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


class EmailProvider:
    def __init__(self) -> None:
        self.requests: list[dict] = []

    async def send(self, *, to: str, subject: str, idempotency_key: str) -> str:
        self.requests.append({"to": to, "subject": subject, "idempotency_key": idempotency_key})
        await asyncio.sleep(0.2)  # long enough for the duplicate in the same response to arrive meanwhile
        return f"msg-{len(self.requests)}"


def tool_outputs(result) -> list:
    return [item.output for item in result.new_items if item.type == "tool_call_output_item"]


@pytest.mark.django_db(transaction=True)
def test_the_same_tool_call_emitted_twice_in_a_run_makes_one_effect_and_a_new_run_makes_its_own():
    provider = EmailProvider()
    page = recipe("agents_sdk", email_api=provider)
    email = {"to": "ada@example.com", "subject": "Following up"}
    # The model emits the call twice in one response, then once more in the next turn (its
    # arguments in another order: the same call).
    model = ScriptedModel([
        [call("c1", email), call("c2", email)],
        [call("c3", dict(reversed(email.items())))],
        [reply("Sent.")],
    ])
    agent = Agent(name="sdr", instructions="Follow up with the lead.", tools=[page.send_email], model=model)

    first = async_to_sync(Runner.run)(agent, "Follow up with Ada.", context=page.Conversation(run_id="run-1"))

    assert first.final_output == "Sent."
    assert tool_outputs(first) == ["msg-1", "msg-1", "msg-1"]  # three calls, one answer
    assert len(provider.requests) == 1  # one effect
    assert Attempt.objects.filter(outcome="claimed").count() == 1
    # The duplicate in the same response waited for the first call's answer (woken when it
    # completed); the next turn's found it stored.
    assert Attempt.objects.filter(outcome="waited").count() == 1
    assert Attempt.objects.filter(outcome="replayed").count() == 1

    # A new run (a new conversation) asking for the same email: it is sent, under its own key.
    model.turns = [[call("c1", email)], [reply("Sent again.")]]
    second = async_to_sync(Runner.run)(agent, "Follow up with Ada.", context=page.Conversation(run_id="run-2"))

    assert tool_outputs(second) == ["msg-2"]
    assert len(provider.requests) == 2
    assert len({request["idempotency_key"] for request in provider.requests}) == 2
    assert sorted(Receipt.objects.values_list("key", flat=True)) == sorted(
        tool_call_key(run, "send_email", email) for run in ("run-1", "run-2")
    )


def test_a_run_that_would_reach_openai_is_caught_by_the_guard(no_network):
    # The guard the other tests run under: a model named by string would be OpenAI's.
    agent = Agent(name="sdr", instructions="Follow up with the lead.", model="gpt-4o")
    with pytest.raises(Exception):  # noqa: B017 - the SDK wraps the refused connection in its own error
        async_to_sync(Runner.run)(agent, "Follow up with Ada.")
    assert no_network and all("openai" in str(host) for host in no_network)
    no_network.clear()
