"""Shared pieces of the viewer tests: the dataset, ``ViewRun``, ``RunningViewer``."""

from __future__ import annotations

import functools
import queue
import sys
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))

from report_support import dataset_items  # noqa: E402

STARTUP_TIMEOUT = 60.0


@attrs.frozen
class ViewRun:
    directory: Path
    dataset: Path
    results: Path
    summary: Path
    transcripts: Path
    audit: Path

    def lines(self) -> list[dict[str, Any]]:
        return [orjson.loads(line) for line in self.results.read_bytes().splitlines() if line.strip()]

    def summary_data(self) -> dict[str, Any]:
        data: dict[str, Any] = orjson.loads(self.summary.read_bytes())
        return data


def view_items() -> list[dict[str, Any]]:
    """The report tests' dataset without the item that waits for its timeout, with targets and choices."""
    items = [dict(item) for item in dataset_items() if item["id"] != "hang-1"]
    for item in items:
        if item["id"].startswith("plain-"):
            item["target"] = "Hello"
            item["choices"] = ["Hello", "Goodbye <b>bold</b>"]
        elif item["id"] == "approve-1":
            item["target"] = ["allowed", "approval"]
    return items


class RunningViewer:
    """A viewer served from a thread of this process."""

    def __init__(self, paths: list[Path], control: Any = None) -> None:
        from dsh_orchestra.view import bind, serve

        self._sock = bind("127.0.0.1", 0)
        self._ready: queue.Queue[Any] = queue.Queue()
        self._token: Any = None
        self._scope: trio.CancelScope | None = None

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                try:
                    async with trio.open_nursery() as nursery:
                        url = await nursery.start(functools.partial(serve, paths, self._sock, control=control))
                        self._ready.put(url)
                except BaseException as exc:
                    self._ready.put(exc)
                    raise

        self._thread = threading.Thread(target=trio.run, args=(main,), name="viewer", daemon=True)
        self._thread.start()
        got = self._ready.get(timeout=STARTUP_TIMEOUT)
        if isinstance(got, BaseException):
            raise got
        self.url: str = got
        self.base, _, query = got.partition("/?")
        self.token = query.removeprefix("token=")

    def page(self, path: str, **params: str) -> str:
        """A URL of this viewer with the token."""
        return f"{self.base}{path}?" + urllib.parse.urlencode({**params, "token": self.token})

    def stop(self) -> None:
        if self._scope is not None and self._token is not None:
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
        self._thread.join(timeout=30)
        self._sock.close()


