"""The browser of the browser tests: Playwright for Python driving the system Chromium.

Nothing is downloaded: Playwright launches Debian's ``/usr/bin/chromium`` by
``executable_path`` (``pip install playwright`` brings the driver, not a browser, and no test
calls ``playwright install``). One browser per test, closed after it, so the suite's leak check
sees no child process left (the Playwright driver is stopped too).

``Tab`` wraps a Playwright page with the few calls the tests make (``evaluate``, ``wait_for``,
``click`` ...) and collects what the page reported as wrong (console errors and warnings,
uncaught exceptions, failed requests); ``tab.page`` is the Playwright page itself.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

SYSTEM_CHROMIUM = "/usr/bin/chromium"
TIMEOUT_MS = 30_000
STARTUP_TIMEOUT_MS = 120_000  # a cold start on a loaded machine (CI beside other suites)
ARGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", "--mute-audio")


def find_chromium() -> str | None:
    """The system Chromium, if installed."""
    if os.path.exists(SYSTEM_CHROMIUM):
        return SYSTEM_CHROMIUM
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Tab:
    """One page of the test's browser."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self._problems: list[str] = []
        page.set_default_timeout(TIMEOUT_MS)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self._problems.append(f"exception: {error}"))
        page.on("requestfailed", lambda request: self._problems.append(f"request failed: {request.url} ({request.failure})"))

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning", "assert"):
            self._problems.append(f"console.{message.type}: {message.text} ({message.location.get('url')})")

    def goto(self, url: str, *, timeout: float = 30.0) -> Any:
        """Navigate and wait for the load event; the response (None for a same-document or
        ``about:`` navigation)."""
        return self.page.goto(url, wait_until="load", timeout=timeout * 1000)

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (a promise is awaited)."""
        return self.page.evaluate(expression)

    def wait_for(self, expression: str, *, timeout: float = 10.0) -> Any:
        """Until ``expression`` is truthy (evaluated every 50 ms); its value.

        Not ``page.wait_for_function``: that evaluates its predicate with ``eval`` inside the
        page, which the report's Content-Security-Policy refuses (as it should)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.page.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {expression!r}")
            self.page.wait_for_timeout(50)

    def click(self, selector: str) -> None:
        """A real mouse click on the element (scrolled into view; Playwright waits until it can be clicked)."""
        self.page.click(selector)

    def type_text(self, selector: str, text: str) -> None:
        """Focus the element and type ``text`` into it, key by key."""
        self.page.locator(selector).press_sequentially(text)

    def press(self, key: str) -> None:
        """Press and release one key (``Escape``, ``Enter``) where the focus is."""
        self.page.keyboard.press(key)

    def screenshot(self, path: Path, *, full_page: bool = False) -> bytes:
        """Save a PNG of the viewport (or the whole page); its bytes."""
        data: bytes = self.page.screenshot(path=str(path), full_page=full_page)
        return data

    def problems(self) -> list[str]:
        """What the page reported as wrong so far."""
        return list(self._problems)

    def close(self) -> None:
        self.page.close()


class Browser:
    """The test's Chromium: ``new_page`` opens a tab of that viewport size."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self._context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)

    def new_page(self, width: int = 1280, height: int = 900) -> Tab:
        page = self._context.new_page()
        page.set_viewport_size({"width": width, "height": height})
        return Tab(page)


@contextmanager
def open_browser() -> Iterator[Browser]:
    """Chromium for one test (skipped locally when it is not installed; CI installs it)."""
    executable = find_chromium()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=list(ARGS), timeout=STARTUP_TIMEOUT_MS)
        try:
            yield Browser(browser)
        finally:
            browser.close()
