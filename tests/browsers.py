"""One Chromium (Debian's, driven by Playwright) for a run of browser tests, a fresh context for
each test: the `browser` fixture.

Launching Playwright's driver and Chromium cost a browser test 2 to 30 s on a loaded two-core
machine, more than most of the tests themselves. The browser is launched by the first test that
asks for it and closed after the last of the tests that run one after another, not at the end of
the session: while Playwright's sync API runs, its event loop is running in this thread, and a
test after it that calls asyncio.run() or async_to_sync would fail. Each test's pages are in
contexts of their own (Browser.new_page makes one), closed when the test ends, so no cookie,
storage or page outlives its test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connections

# Playwright's sync API runs an event loop in this thread; Django then refuses ORM calls
# from it unless told that this is deliberate (documented pytest-django workaround).
# Even so, an ORM call made while Playwright runs gets a connection of its own (asgiref keeps
# Django's connections per context while a loop runs): the hook below closes them after each
# browser test, and before the loop stops, so that none is left open on the test database.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"  # for a human to look at
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run", "--disable-sync"]


class SharedChromium:
    """The Playwright driver and its Chromium, started on first use; a pytest plugin while
    they run, which closes them once the next test is not a browser test."""

    def __init__(self) -> None:
        self.playwright = None
        self.chromium = None
        self.config: pytest.Config | None = None

    def get(self, config: pytest.Config):
        if self.chromium is not None and not self.chromium.is_connected():
            self.close()  # it crashed: the next test gets a new one
        if self.chromium is None:
            from playwright.sync_api import sync_playwright

            self.playwright = sync_playwright().start()
            self.chromium = self.playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            self.config = config
            config.pluginmanager.register(self, "shared-chromium")
        return self.chromium

    def close(self) -> None:
        if self.playwright is None:
            return
        connections.close_all()  # those of Playwright's context, while its loop still runs
        try:
            if self.chromium is not None and self.chromium.is_connected():
                self.chromium.close()
        finally:
            self.playwright.stop()
            self.playwright = self.chromium = None
            if self.config is not None and self.config.pluginmanager.is_registered(self):
                self.config.pluginmanager.unregister(self)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        try:
            return (yield)
        finally:
            connections.close_all()
            if nextitem is None or "browser" not in getattr(nextitem, "fixturenames", ()):
                self.close()

    def pytest_sessionfinish(self) -> None:
        self.close()


SHARED = SharedChromium()


@pytest.fixture
def browser(request: pytest.FixtureRequest):
    """Chromium, shared with the browser tests before and after this one; the contexts (and
    so pages) this test opened are closed when it ends."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("IDEMDASH_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium (or run .ci/run)")
    SHOTS.mkdir(parents=True, exist_ok=True)
    chromium = SHARED.get(request.config)
    yield chromium
    for context in chromium.contexts:
        context.close()
