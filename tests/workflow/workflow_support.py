"""Helpers of the workflow tests (the ``sim_spec`` fixture is in conftest.py).

* ``scenario(toml_text)``: a parsed scenario script (docs/scenarios.md).
* :class:`WireMeter`: a fake in the middle of the wire. It counts, from the frames themselves,
  the sessions with a prompt in flight (from the ``session/prompt`` request to the response of
  the ``session/wait`` that follows it) and can answer chosen ``session/prompt`` requests
  with a JSON-RPC error itself (a protocol rejection the runtime never saw).
* ``children_pids()``: this test process's descendants; ``RECIPES``: the repository's recipes.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import psutil
import trio
import trio.testing

from dsh_orchestra.testing._script import Script, parse_script

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"


def scenario(text: str) -> Script:
    """Parse a scenario script given as TOML text."""
    return parse_script(tomllib.loads(text), source="test scenario")


class WireMeter:
    """Counts prompts in flight on one wire; optionally rejects some prompts itself."""

    def __init__(self, reject: Callable[[int, dict[str, Any]], bool] | None = None) -> None:
        self.reject = reject
        self.in_flight: set[str] = set()
        self.max_in_flight = 0
        self.prompts = 0
        self.rejected = 0
        self.prompts_by_session: dict[str, int] = {}
        self._waits: dict[Any, str] = {}

    def _client_frame(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        """Note a client frame; return an error response to send back instead, or None."""
        method, params = frame.get("method"), frame.get("params") or {}
        if method == "session/prompt":
            self.prompts += 1
            if self.reject is not None and self.reject(self.prompts, params):
                self.rejected += 1
                return {"jsonrpc": "2.0", "id": frame["id"], "error": {"code": -32603, "message": "rejected by the wire meter"}}
            session = params["sessionId"]
            self.prompts_by_session[session] = self.prompts_by_session.get(session, 0) + 1
            self.in_flight.add(session)
            self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
        elif method == "session/wait":
            self._waits[frame["id"]] = params["sessionId"]
        return None

    def _server_frame(self, frame: dict[str, Any]) -> None:
        if "method" not in frame and frame.get("id") in self._waits:
            self.in_flight.discard(self._waits.pop(frame["id"]))

    @asynccontextmanager
    async def wrap(self, inner: trio.abc.Stream) -> AsyncIterator[trio.abc.Stream]:
        """Yield a client stream whose frames pass through this meter to ``inner``."""
        client, ours = trio.testing.memory_stream_pair()
        lock = trio.Lock()

        async def send_to_client(line: bytes) -> None:
            async with lock:
                await ours.send_all(line)

        async def upstream() -> None:  # client -> runtime
            buffer = b""
            try:
                while data := await ours.receive_some(65536):
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        answer = self._client_frame(orjson.loads(line)) if line.strip() else None
                        if answer is not None:
                            await send_to_client(orjson.dumps(answer) + b"\n")
                        else:
                            await inner.send_all(line + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            await inner.aclose()

        async def downstream() -> None:  # runtime -> client
            buffer = b""
            try:
                while data := await inner.receive_some(65536):
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        if line.strip():
                            self._server_frame(orjson.loads(line))
                        await send_to_client(line + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            await ours.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(upstream)
            nursery.start_soon(downstream)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()


def children_pids() -> set[int]:
    """The pids of this test process's children (recursive), from the process table."""
    try:
        return {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}
    except psutil.Error:  # pragma: no cover
        return set()
