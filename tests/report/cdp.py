"""A small Chrome DevTools Protocol driver over ``--remote-debugging-pipe`` (no dependency).

Chromium reads commands from fd 3 and writes replies and events to fd 4, each message one JSON
document ended by NUL. The browser is started in its own process group with a fresh profile
directory and is always closed (Browser.close, then SIGKILL of its group if it lingers).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

STARTUP_TIMEOUT = 120.0
"""Seconds the browser may take to answer its first command (starting Chromium)."""

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--mute-audio",
    "--remote-debugging-pipe",
)


class CdpError(RuntimeError):
    """The browser answered a command with an error, or did not answer in time."""


def find_chromium() -> str | None:
    """The chromium executable, if installed."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


class Browser:
    """One headless Chromium process driven over the debugging pipe."""

    def __init__(self, executable: str, profile: Path) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # Move the child's ends above 9 so that placing them on 3 and 4 cannot clobber each other.
        child_r = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_browser_r)
        os.close(from_browser_w)

        def place_pipes() -> None:  # in the child, before exec
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        self.stderr_path = profile / "chromium-stderr.log"
        self._stderr = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={profile / 'profile'}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            pass_fds=(3, 4),
            preexec_fn=place_pipes,
            start_new_session=True,
        )
        os.close(child_r)
        os.close(child_w)
        self._buffer = b""
        self._ids = 0
        self._answered = False  # the browser's first answer can take a cold start's time
        self.events: list[dict[str, Any]] = []

    # ---- wire -------------------------------------------------------------------------------

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CdpError("the browser did not answer in time")
            ready, _, _ = select.select([self._from_browser], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise CdpError(f"the browser closed the pipe (exit status {self.process.poll()})")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        value: dict[str, Any] = json.loads(message)
        return value

    def send(self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """Send one command and return its result (events that arrive meanwhile are kept)."""
        self._ids += 1
        message: dict[str, Any] = {"id": self._ids, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode("utf-8") + b"\0"
        while data:
            data = data[os.write(self._to_browser, data):]
        if not self._answered:  # a cold start on a loaded machine (CI beside other suites)
            timeout = max(timeout, STARTUP_TIMEOUT)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._ids:
                self._answered = True
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, *, session: str | None = None, timeout: float = 30.0) -> dict[str, Any]:
        """The first event ``method`` (of ``session``) not yet consumed."""
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method and (session is None or event.get("sessionId") == session):
                    return self.events.pop(index)
            self.events.append(self._read_message(deadline))

    def new_page(self, width: int = 1280, height: int = 900) -> Page:
        """A new tab with Runtime, Page and Log enabled."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        for domain in ("Runtime", "Page", "Log"):
            page.send(f"{domain}.enable")
        page.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return page

    def close(self) -> None:
        """Close the browser and reap it (its whole process group is killed if it lingers)."""
        if self.process.poll() is None:
            try:
                self.send("Browser.close", timeout=5)
            except (CdpError, OSError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=10)
        else:
            try:  # helpers of the browser that outlived it
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._stderr.close()


class Page:
    """One attached tab."""

    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.browser = browser
        self.target = target
        self.session = session

    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 30.0) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session, timeout=timeout)

    def goto(self, url: str, *, timeout: float = 30.0) -> None:
        """Navigate and wait for the load event."""
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CdpError(f"navigation to {url} failed: {result['errorText']}")
        self.browser.wait_event("Page.loadEventFired", session=self.session, timeout=timeout)

    def evaluate(self, expression: str, *, timeout: float = 30.0) -> Any:
        """The value of a JavaScript expression (promises awaited); page exceptions raise."""
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, timeout=timeout)
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 10.0) -> Any:
        """Poll until ``expression`` is truthy; returns its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"timed out waiting for {expression!r}")
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the centre of the element."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2, r.width, r.height]; })()"
        )
        if not box or box[2] <= 0 or box[3] <= 0:
            raise CdpError(f"no visible element {selector!r}")
        x, y = box[0], box[1]
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type_text(self, selector: str, text: str) -> None:
        """Focus the element and type ``text`` into it (as an input method would)."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def press(self, key: str) -> None:
        """Press and release one key (``Escape``, ``Enter``)."""
        codes = {"Escape": 27, "Enter": 13}
        for kind in ("keyDown", "keyUp"):
            self.send("Input.dispatchKeyEvent", {"type": kind, "key": key, "code": key, "windowsVirtualKeyCode": codes.get(key, 0)})

    def screenshot(self, path: Path, *, full_page: bool = False) -> bytes:
        """Save a PNG of the viewport (or the whole page) and return its bytes."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        path.write_bytes(data)
        return data

    def problems(self) -> list[str]:
        """Console errors, uncaught exceptions and error log entries (CSP violations included)
        reported by this page so far."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
                found.append(f"console.{params.get('type')}: {params.get('args')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                found.append(f"log: {params['entry'].get('text')} ({params['entry'].get('url')})")
        return found

    def close(self) -> None:
        self.browser.send("Target.closeTarget", {"targetId": self.target})
