"""Helpers for a project's own tests: run the step twice, assert it happened once.

    assert_runs_once(lambda: send_welcome(7), times=2, effects=lambda: len(mail.outbox))

Each calls the step as production would (in a row, from threads and forked processes at
once, or killed right after its effect) and raises AssertionError when the effect happened
more than once, or the callers did not all get the one result (docs/testing.md)."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue as queue_module
import signal
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import connection, connections
from django.utils import timezone

from idemdash_client.context import current
from idemdash_client.errors import OutcomeUnknown, RequestInProgress
from receipts.decorators import REPLAYED_HEADER

# A key that no caller of the store would send by accident.
VIEW_KEY = "receipts-testing-run-twice"


def clear_receipts() -> int:
    """Delete every receipt and its attempts; returns how many receipts there were."""
    from receipts.models import Attempt, Receipt

    Attempt.objects.all().delete()
    deleted, _ = Receipt.objects.all().delete()
    return deleted


class Provider:
    """A stand-in for a provider that honours idempotency keys: one effect per distinct
    `idempotency_key`, one per call without one. Calls are appended to a file, so a step run
    in forked processes (or killed right after its call) is counted by the test's process."""

    def __init__(self, path: str | Path | None = None, *, returns: Any = None) -> None:
        if path is None:
            fd, path = tempfile.mkstemp(prefix="receipts-provider-", suffix=".jsonl")
            os.close(fd)
        self.path = Path(path)
        self.path.touch()
        self.returns = returns
        # Set in the child that assert_survives_crash_after_effect kills right after its call.
        self._die_after_call = False

    def __call__(self, *args: Any, idempotency_key: str | None = None, **kwargs: Any) -> Any:
        claim = current()
        record = {
            "idempotency_key": idempotency_key,
            # The claim the step ran under, so the crash helper can find its receipt.
            "claim": None if claim is None else [claim.scope, claim.key, claim.fencing_token, claim.attempt],
            "pid": os.getpid(),
        }
        # One unbuffered append: lines never interleave, and the kernel has it before any kill.
        with open(self.path, "ab", buffering=0) as file:
            file.write((json.dumps(record) + "\n").encode())
        if self._die_after_call:
            os.kill(os.getpid(), signal.SIGKILL)
        return self.returns

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.path.read_text().splitlines()]

    def keys(self) -> list[str | None]:
        return [call["idempotency_key"] for call in self.calls()]

    def effects(self) -> int:
        keys = self.keys()
        return len({k for k in keys if k is not None}) + keys.count(None)


def assert_runs_once(call: Callable[[], Any], *, effects: Callable[[], int], times: int = 2) -> list[Any]:
    """`times` calls in a row make one effect and return one result. Returns the results."""
    _need_times(times, 2)
    before = effects()
    results = [call() for _ in range(times)]
    _assert_one_effect(effects() - before, f"called {times} times in a row")
    first = _outcome(results[0])
    for number, result in enumerate(results[1:], 2):
        if _outcome(result) != first:
            raise AssertionError(f"call {number} returned {_shown(result)}, not the first call's {_shown(results[0])}")
    return results


def assert_view_runs_once(
    client: Any,
    path: str,
    *,
    effects: Callable[[], int],
    times: int = 2,
    method: str = "post",
    key: str = VIEW_KEY,
    **request: Any,
) -> list[Any]:
    """The request sent `times` times with one Idempotency-Key through a test `client` makes
    one effect, and every later response replays the first. `request` goes to the client's
    method (data=, content_type=, headers=). Returns the responses."""
    _need_times(times, 2)
    send = getattr(client, method.lower())
    headers = {**request.pop("headers", {}), "Idempotency-Key": key}
    before = effects()
    responses = [send(path, headers=headers, **request) for _ in range(times)]
    first = responses[0]
    _assert_one_effect(effects() - before, f"{method.upper()} {path} sent {times} times with one Idempotency-Key")
    if first.status_code >= 400:
        raise AssertionError(f"the first {method.upper()} {path} was answered {first.status_code}: {_body(first)}")
    for number, response in enumerate(responses[1:], 2):
        if (response.status_code, response.content) != (first.status_code, first.content):
            raise AssertionError(f"request {number} was answered {_shown(response)}, not the first request's {_shown(first)}")
        if response.headers.get(REPLAYED_HEADER) != "true":
            raise AssertionError(f"request {number} is not marked {REPLAYED_HEADER}: true, so the view ran again")
    return responses


@dataclass(frozen=True)
class Concurrently:
    """What the callers of assert_runs_once_concurrently got: the one result (a response as
    (status, body)), how many callers, and how many were told the key was in progress."""

    result: Any
    callers: int
    refused: int


def assert_runs_once_concurrently(
    call: Callable[[], Any], *, effects: Callable[[], int], threads: int = 4, processes: int = 0
) -> Concurrently:
    """`threads` callers at once, each on its own connection (with `processes`, that many
    forked processes of `threads` each), make one effect; each gets the one result or is told
    the key is in progress. For a view, make a new test Client in `call`."""
    _need_times(threads, 1 if processes else 2)
    if processes < 0:
        raise ValueError("processes= is 0 (threads of this process) or more")
    _need_committed_data("assert_runs_once_concurrently")
    before = effects()
    if processes:
        outcomes = _in_forked_processes(call, threads, processes)
    else:
        outcomes = _in_threads(call, threads)
    callers = len(outcomes)
    made = effects() - before
    where = f"{threads} threads" + (f" in each of {processes} processes" if processes else "")
    _assert_one_effect(made, f"called from {where} at once", hint=processes > 0)
    errors = [o for o in outcomes if o[0] == "error"]
    if errors:
        raise AssertionError(f"{len(errors)} of {callers} callers raised: {errors[0][1]}")
    refused = [o for o in outcomes if _refused(o)]
    served = [o for o in outcomes if not _refused(o)]
    if not served:
        raise AssertionError(f"all {callers} callers were refused as in progress; none got the result")
    different = [o for o in served if o != served[0]]
    if different:
        raise AssertionError(f"callers got different results: {_shown(served[0])} and {_shown(different[0])}")
    return Concurrently(result=served[0][1] if served[0][0] == "result" else served[0][1:], callers=callers, refused=len(refused))


def _call_outcome(call: Callable[[], Any]) -> tuple:
    try:
        return _outcome(call())
    except RequestInProgress:
        return ("in-progress",)
    except Exception as exc:  # reported to the test's process, which fails the assertion
        return ("error", f"{type(exc).__name__}: {exc}")
    finally:
        connections.close_all()


def _in_threads(call: Callable[[], Any], threads: int) -> list[tuple]:
    barrier = threading.Barrier(threads)
    outcomes: list[tuple] = []

    def caller() -> None:
        barrier.wait()
        outcomes.append(_call_outcome(call))

    started = [threading.Thread(target=caller) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
    return outcomes


def _threads_of_a_process(call: Callable[[], Any], threads: int, go: Any, queue: Any) -> None:
    go.wait(60)
    queue.put(_in_threads(call, threads))


def _in_forked_processes(call: Callable[[], Any], threads: int, processes: int) -> list[tuple]:
    # Forked, not spawned: `call` may be a closure, and the children inherit the test's settings.
    connections.close_all()
    ctx = multiprocessing.get_context("fork")
    queue, go = ctx.Queue(), ctx.Event()
    children = [ctx.Process(target=_threads_of_a_process, args=(call, threads, go, queue)) for _ in range(processes)]
    for child in children:
        child.start()
    go.set()
    try:
        outcomes = [o for _ in children for o in queue.get(timeout=300)]
    except queue_module.Empty:
        raise AssertionError("a caller process gave no answer within 300 s") from None
    finally:
        for child in children:
            child.join(30)
            if child.is_alive():
                child.kill()
                child.join()
    for child in children:
        if child.exitcode != 0:
            raise AssertionError(f"a caller process ended with exit code {child.exitcode}")
    return outcomes


@dataclass(frozen=True)
class Crash:
    """What assert_survives_crash_after_effect saw."""

    keys: list[str | None]  # what the provider was sent: by the killed attempt, then the retry
    result: Any  # what the retry returned


def assert_survives_crash_after_effect(call: Callable[[], Any], provider: Provider, *, timeout: float = 60) -> Crash:
    """The first attempt, killed (SIGKILL, in a forked process) right after it reached
    `provider`, is retried with the key it sent, and a third call replays: one effect
    (docs/testing.md, "What the crash helper proves")."""
    seen = _killed_after_effect(call, provider, timeout, "assert_survives_crash_after_effect")
    try:
        result = call()
    except OutcomeUnknown:
        raise AssertionError(
            "the retry was answered outcome-unknown: the step's operation holds a key after a crash "
            '(after_crash: "hold"); assert that with assert_held_after_crash'
        ) from None
    retried = len(provider.calls()) - seen
    again = call()
    keys = provider.keys()[seen:]
    if len(keys) != retried:
        raise AssertionError(f"a call after the retry reached the provider again: it was sent {keys}")
    if _outcome(again) != _outcome(result):
        raise AssertionError(f"the call after the retry returned {_shown(again)}, not the retry's {_shown(result)}")
    distinct = {k for k in keys if k is not None}
    if None in keys or len(distinct) != 1:
        raise AssertionError(
            f"the provider was sent {keys} by the killed attempt and the retry: {len(distinct) + keys.count(None)} "
            "effects; send it receipts.current().downstream_key, the same for every attempt of a claim"
        )
    return Crash(keys=keys, result=result)


@dataclass(frozen=True)
class Held:
    """What assert_held_after_crash saw: the receipt left outcome-unknown, for the test to resolve."""

    receipt: Any  # receipts.models.Receipt
    downstream_key: str | None  # what the killed attempt sent the provider


def assert_held_after_crash(
    call: Callable[[], Any], provider: Provider, *, retries: int = 2, timeout: float = 60
) -> Held:
    """Under `after_crash: "hold"`: the first attempt, killed right after its effect, leaves
    its key held; each of `retries` calls is answered outcome-unknown and none reaches the
    provider. Returns the held receipt, for the test to resolve."""
    _need_times(retries, 1)
    seen = _killed_after_effect(call, provider, timeout, "assert_held_after_crash")
    for number in range(1, retries + 1):
        try:
            answer = call()
        except OutcomeUnknown:
            answer = None
        if answer is not None and not _held_response(answer):
            raise AssertionError(
                f"retry {number} after the crash returned {_shown(answer)}, not outcome-unknown: the step's "
                'operation re-runs a key after a crash; hold it with RECEIPTS_OPERATIONS {...: {"after_crash": "hold"}}'
            )
        calls = provider.calls()[seen:]
        if len(calls) != 1:
            raise AssertionError(f"retry {number} after the crash reached the provider: it was sent {[c['idempotency_key'] for c in calls]}")
    scope, key, *_ = provider.calls()[seen]["claim"]
    from receipts.models import Receipt

    return Held(receipt=Receipt.objects.get(scope=scope, key=key), downstream_key=provider.keys()[seen])


def _held_response(value: Any) -> bool:
    outcome = _outcome(value)
    return outcome[0] == "response" and outcome[1] == 409 and b"outcome-unknown" in outcome[2]


def _killed_after_effect(call: Callable[[], Any], provider: Provider, timeout: float, helper: str) -> int:
    """Run `call` in a forked process killed right after it reaches `provider`, check that it
    left its receipt processing, and end its lease. Returns the provider's calls before."""
    from receipts.models import Receipt

    _need_committed_data(helper)
    seen = len(provider.calls())
    connections.close_all()
    child = multiprocessing.get_context("fork").Process(target=_die_after_effect, args=(call, provider))
    child.start()
    child.join(timeout)
    if child.is_alive():
        child.kill()
        child.join()
        raise AssertionError(f"the first attempt did not reach the provider within {timeout} s")
    if child.exitcode != -signal.SIGKILL:
        raise AssertionError(
            f"the first attempt ended (exit code {child.exitcode}) without calling the provider: "
            "the step must call the Provider where it makes its effect"
        )
    killed = provider.calls()[seen:]
    claim = killed[0]["claim"]
    if claim is None:
        raise AssertionError(
            "the provider was called outside any claim: nothing made the step idempotent "
            "(run_once, @receipts.once, an @idempotent view)"
        )
    scope, key, token, _ = claim
    receipt = Receipt.objects.get(scope=scope, key=key)
    if receipt.status != Receipt.Status.PROCESSING or receipt.fencing_token != token:
        raise AssertionError(f"the killed attempt's receipt is {receipt.status}, not left processing by it")
    Receipt.objects.filter(pk=receipt.pk, fencing_token=token).update(lease_expires_at=timezone.now())
    return seen


def _die_after_effect(call: Callable[[], Any], provider: Provider) -> None:
    provider._die_after_call = True
    call()
    # Reached only when the step never called the provider: exit 0 tells the test so.


def _need_times(times: int, least: int) -> None:
    if not isinstance(times, int) or times < least:
        raise ValueError(f"needs {least} calls or more to show the effect happens once, got {times!r}")


def _need_committed_data(helper: str) -> None:
    """Callers on other connections see only committed data: refuse a test inside a
    transaction, and an in-memory SQLite database, which other processes cannot open."""
    if connection.in_atomic_block:
        raise RuntimeError(
            f"{helper} runs callers on other database connections, which cannot see this test's "
            "transaction: mark the test @pytest.mark.django_db(transaction=True)"
        )
    if connection.vendor == "sqlite" and connection.is_in_memory_db():
        raise RuntimeError(
            f"{helper} runs callers in other processes or threads, which cannot share an in-memory "
            'SQLite database: give the test database a file (DATABASES["default"]["TEST"]["NAME"])'
        )


def _assert_one_effect(made: int, how: str, *, hint: bool = False) -> None:
    if made == 1:
        return
    message = f"{how}: {made} effects, not 1"
    if made == 0 and hint:
        message += " (effects() must count what other processes do: a table, a file, a Provider; not a list in this one)"
    raise AssertionError(message)


def _outcome(value: Any) -> tuple:
    """What a caller got, comparable and picklable: a response by its status and body."""
    if hasattr(value, "status_code") and hasattr(value, "content"):
        return ("response", value.status_code, bytes(value.content))
    return ("result", value)


def _refused(outcome: tuple) -> bool:
    if outcome[0] == "in-progress":
        return True
    return outcome[0] == "response" and outcome[1] == 409 and b"request-in-progress" in outcome[2]


def _body(response: Any) -> str:
    return bytes(response.content)[:200].decode(errors="replace")


def _shown(value: Any) -> str:
    outcome = value if isinstance(value, tuple) and value and value[0] in ("response", "result") else _outcome(value)
    if outcome[0] == "response":
        return f"{outcome[1]} {outcome[2][:200].decode(errors='replace')}"
    return repr(outcome[1])[:200]
