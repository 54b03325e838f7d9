"""The pytest plugin idemdash registers (entry point `pytest11`): fixtures over
receipts/testing.py. Loaded into every pytest run where idemdash is installed, so importing
it imports neither Django nor the models until a test asks for a fixture."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def _receipts_listener_closed(django_db_setup: None) -> Iterator[None]:
    # The LISTEN connection and the observer's flusher end before pytest-django drops the test
    # database, which this teardown precedes.
    yield
    from receipts import observe, waiting

    waiting.stop_listener()
    observe.stop_flusher()


@pytest.fixture
def isolated_receipts(db: None, _receipts_listener_closed: None) -> None:
    """The test's database with no receipts in it, whatever earlier tests' threads committed."""
    # `db` named, not fetched: pytest-django sets up only the databases that fixtures name.
    from receipts.testing import clear_receipts

    clear_receipts()


class Idempotency:
    """receipts.testing's helpers, counting `provider`'s effects unless given `effects=`."""

    def __init__(self, provider: Any) -> None:
        from receipts import testing  # here, not at import: the plugin must not import Django

        self.provider = provider
        self._testing = testing

    def _effects(self, effects: Callable[[], int] | None) -> Callable[[], int]:
        return effects if effects is not None else self.provider.effects

    def assert_runs_once(self, call: Callable[[], Any], *, times: int = 2,
                         effects: Callable[[], int] | None = None) -> list[Any]:
        return self._testing.assert_runs_once(call, times=times, effects=self._effects(effects))

    def assert_view_runs_once(self, client: Any, path: str, *, times: int = 2,
                              effects: Callable[[], int] | None = None, **request: Any) -> list[Any]:
        return self._testing.assert_view_runs_once(client, path, times=times, effects=self._effects(effects), **request)

    def assert_runs_once_concurrently(self, call: Callable[[], Any], *, threads: int = 4, processes: int = 0,
                                      effects: Callable[[], int] | None = None) -> Any:
        return self._testing.assert_runs_once_concurrently(
            call, threads=threads, processes=processes, effects=self._effects(effects)
        )

    def assert_survives_crash_after_effect(self, call: Callable[[], Any], *, timeout: float = 60) -> Any:
        return self._testing.assert_survives_crash_after_effect(call, self.provider, timeout=timeout)

    def assert_held_after_crash(self, call: Callable[[], Any], *, retries: int = 2, timeout: float = 60) -> Any:
        return self._testing.assert_held_after_crash(call, self.provider, retries=retries, timeout=timeout)


@pytest.fixture
def idempotency(isolated_receipts: None, tmp_path: Path) -> Idempotency:
    """Isolated receipts, a `Provider` of the test's own, and receipts.testing's helpers."""
    from receipts.testing import Provider

    return Idempotency(Provider(tmp_path / "receipts-provider.jsonl"))
