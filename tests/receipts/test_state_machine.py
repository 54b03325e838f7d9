"""Model-based test of the receipt state machine, in any interleaving.

Hypothesis drives claim, complete, fail, release and the passage of time (past leases and
past expiry) against the real store and database, and checks every answer against a small
reference model. Invariants: at most one live owner per key, a completed result never
changes while the receipt lives, and a stale token never writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
import time_machine
from hypothesis import HealthCheck, settings as hypothesis_settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from receipts import store
from receipts.models import Attempt, Receipt

SCOPE = "client:model"
LEASE = 30
# Key "b" belongs to an operation that burns its key on failure.
OPERATIONS = {"a": "email.send", "b": "ledger.post"}
TTL = timedelta(hours=24)


@dataclass
class Model:
    status: str = ""  # "" = absent
    token: int = 0
    lease_until: datetime | None = None
    expires_at: datetime | None = None
    request: int = 0
    retryable: bool = True
    result: str | None = None
    released: bool = False  # given back and not claimed since


@dataclass
class Holder:
    key: str
    token: int


class ReceiptMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        Attempt.objects.all().delete()
        Receipt.objects.all().delete()
        self.now = datetime(2026, 1, 1, tzinfo=dt_timezone.utc)
        self.model = {k: Model() for k in OPERATIONS}
        self.holders: list[Holder] = []

    def _at_now(self):
        return time_machine.travel(self.now, tick=False)

    def _absent(self, m: Model) -> bool:
        return not m.status or self.now >= m.expires_at

    @rule(key=st.sampled_from(sorted(OPERATIONS)), request=st.integers(0, 1))
    def claim(self, key: str, request: int) -> None:
        m = self.model[key]
        with self._at_now():
            result = store.claim(SCOPE, key, OPERATIONS[key], {"r": request}, lease_seconds=LEASE)
        if self._absent(m):
            expected = "claimed"
        elif m.request != request:
            expected = "mismatch"
        elif m.status == "completed":
            expected = "replayed"
        elif m.status == "failed":
            expected = "retried_after_failure" if m.retryable else "replayed"
        elif m.lease_until > self.now:
            expected = "in_progress"
        else:
            expected = "lease_takeover"
        assert result.outcome == expected, (result.outcome, expected, m)
        if expected == "replayed" and m.status == "completed":
            assert result.receipt.response_body == m.result  # a completed result never changes
        if result.owned:
            assert result.token == m.token + 1, "an ownership change must issue a new fencing token"
            if expected == "claimed":
                m.expires_at, m.request, m.result = self.now + TTL, request, None
            m.status, m.token, m.lease_until = "processing", result.token, self.now + timedelta(seconds=LEASE)
            m.released = False
            self.holders.append(Holder(key, result.token))

    def _settle(self, holder_index: int, fn, status: str, same, **kwargs) -> Model | None:
        holder = self.holders[holder_index % len(self.holders)]
        m = self.model[holder.key]
        # The fencing token alone decides: an owner whose receipt passed its TTL may still
        # settle it as long as nobody claimed the key anew (which would bump the token).
        owns = m.status == "processing" and m.token == holder.token
        # The same settlement sent again (its answer lost) is done, and changes nothing.
        repeats = not owns and m.status == status and m.token == holder.token and same(m)
        before = Receipt.objects.filter(scope=SCOPE, key=holder.key).values().first()
        with self._at_now():
            try:
                fn(store.Held(SCOPE, holder.key, holder.token), **kwargs)
                accepted = True
            except store.StaleToken:
                accepted = False
        assert accepted == (owns or repeats), (accepted, owns, repeats, m, holder)
        if not owns:  # a stale token, or a repeat, never writes
            after = Receipt.objects.filter(scope=SCOPE, key=holder.key).values().first()
            assert after == before
            return None
        m.status, m.lease_until = status, None
        return m

    @precondition(lambda self: self.holders)
    @rule(holder=st.integers(0, 50), body=st.sampled_from(["result-1", "result-2"]))
    def complete(self, holder: int, body: str) -> None:
        m = self._settle(holder, store.complete, "completed", lambda m: m.result == body, body=body)
        if m is not None:
            m.result = body

    @precondition(lambda self: self.holders)
    @rule(holder=st.integers(0, 50), retryable=st.sampled_from([None, True, False]))
    def fail(self, holder: int, retryable: bool | None) -> None:
        key = self.holders[holder % len(self.holders)].key
        resolved = (key != "b") if retryable is None else retryable
        m = self._settle(holder, store.fail, "failed", lambda m: m.retryable == resolved, error="boom", retryable=retryable)
        if m is not None:
            m.retryable = resolved

    @rule(key=st.sampled_from(sorted(OPERATIONS)))
    def operator_release(self, key: str) -> None:
        m = self.model[key]
        receipt = Receipt.objects.filter(scope=SCOPE, key=key).first()
        if receipt is None:
            assert not m.status
            return
        with self._at_now():
            try:
                store.release(receipt, actor="operator")
                released = True
            except store.NotReleasable:
                released = False
        # A released key is not released twice: it waits for the caller's next attempt.
        assert released == (m.status != "completed" and not m.released)
        if released:
            m.status, m.retryable, m.token, m.lease_until = "failed", True, m.token + 1, None
            m.released = True

    @rule(seconds=st.sampled_from([1, 10, LEASE + 1, 3600, 25 * 3600]))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @invariant()
    def at_most_one_live_owner_per_key(self) -> None:
        for key, m in self.model.items():
            live = [
                h
                for h in self.holders
                if h.key == key and m.status == "processing" and h.token == m.token and not self._absent(m)
            ]
            assert len(live) <= 1
            row = Receipt.objects.filter(scope=SCOPE, key=key).first()
            if m.status:
                assert row is not None and row.fencing_token == m.token and row.status == m.status
                assert row.released == m.released


@pytest.mark.django_db(transaction=True)
def test_the_receipt_state_machine_holds_its_invariants_in_any_interleaving(settings):
    settings.RECEIPTS_OPERATIONS = {"ledger.*": {"on_failure": "burn"}}
    run_state_machine_as_test(
        ReceiptMachine,
        settings=hypothesis_settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
