"""Clocks a test holds: "after its lease", "out of time" or "a second of waiting" happen when
the test says so, at once and in order, without a sleep (tests/conftest.py refuses one in the
fast tier). time-machine holds the wall clock (timezone.now()); these hold time.monotonic(),
which time-machine leaves alone, for the modules a test names."""

from __future__ import annotations

import threading
import time
from types import ModuleType
from typing import Any

import pytest


class HeldClock:
    """time.monotonic() as the modules given to `held_clock` see it: the real clock plus what
    was added by `advance`. A time.sleep(s) in those modules adds s at once instead of
    waiting, and is kept in `slept`."""

    def __init__(self) -> None:
        self.added = 0.0
        self.slept: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return time.monotonic() + self.added

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.added += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(max(0.0, seconds))


class _Time:
    """The time module of a module whose clock is held: monotonic and sleep are the clock's."""

    def __init__(self, clock: HeldClock) -> None:
        self.monotonic, self.sleep = clock.monotonic, clock.sleep

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def held_clock(monkeypatch: pytest.MonkeyPatch, *modules: ModuleType) -> HeldClock:
    """One HeldClock for `modules` (each of which does `import time`), for the test's length."""
    clock = HeldClock()
    for module in modules:
        monkeypatch.setattr(module, "time", _Time(clock))
    return clock


class HeldWaiterTimer:
    """A receipt waiter's fallback timer (receipts/waiting.py: Wakeup.wait) on the store's held
    clock: a wait that nobody ends returns at once and moves the clock on by its interval, as
    if the interval had run out, until `reach` seconds were waited so; then `reached` is set,
    and from there on the waiter waits for a real wake-up (a completion). `intervals` are the
    timer's waits that ran out: one look at the database after each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, reach: float) -> None:
        from receipts import store, waiting

        self.clock = held_clock(monkeypatch, store)
        self.reach = reach
        self.reached = threading.Event()
        self.intervals: list[float] = []
        timer = self

        class Event(threading.Event):
            def wait(self, timeout: float | None = None) -> bool:
                if self.is_set():
                    return True
                assert timeout is not None
                if timer.clock.added + timeout < timer.reach:
                    timer.intervals.append(timeout)
                    timer.clock.advance(timeout)
                    return False
                timer.clock.advance(max(0.0, timer.reach - timer.clock.added))
                timer.reached.set()
                return super().wait(30)

        subscribe = waiting.Wakeup.__init__

        def held_event(wakeup: waiting.Wakeup, topic: str) -> None:
            subscribe(wakeup, topic)
            wakeup.event = Event()

        monkeypatch.setattr(waiting.Wakeup, "__init__", held_event)
