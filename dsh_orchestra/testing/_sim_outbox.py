"""The simulator's stream I/O: batched notification writes, and requests read in arrival order.

Owns the ordering promise the runtime makes: every notification committed before a response
is written before it. Emitters call :meth:`Outbox.notify` (no await, no task switch); one
writer task joins whatever is queued into a single ``send_all`` through the connection's
write lock, so a busy turn costs one write per scheduling round, not one per event. A request
handler calls :meth:`Outbox.flush` before it returns; the connection writes its response
after that, behind the same lock. Before each write a ``before_write`` hook runs (the
simulator persists its dirty sessions there: the store is never behind what the client saw).

:class:`OneLineAtATime` hands the connection one line per read. The connection starts a task
per request, and trio runs a batch of ready tasks in either order; one line per read makes
each request's handler start (and run up to its first wait) before the next request is even
dispatched, as the real runtime's event loop does: two prompts written together get their
receipts in the order they were sent.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson
import trio

from ..protocol import TransportClosedError
from ..transport import Connection

HIGH_WATER = 4 * 1024 * 1024
"""Queued bytes above which :meth:`Outbox.wait_writable` blocks (a full pipe stalls the runtime)."""


class Outbox:
    """Batches notification frames onto one connection. Start :meth:`run` in a nursery."""

    def __init__(
        self,
        connection: Connection,
        *,
        high_water: int = HIGH_WATER,
        before_write: Callable[[], None] | None = None,
    ) -> None:
        self._connection = connection
        self._high_water = high_water
        self._before_write = before_write
        self._chunks: list[bytes] = []
        self._queued_bytes = 0
        self._enqueued = 0  # frames queued since the start
        self._written = 0  # frames written since the start
        self._wake = trio.Event()
        self._progress = trio.Event()
        self._open = True
        self._broken = False
        self.frames_written = 0
        self.writes = 0

    @property
    def open(self) -> bool:
        """False once :meth:`close` ran: notifications are dropped (listeners detached)."""
        return self._open

    @property
    def broken(self) -> bool:
        """True when a write failed (the client went away)."""
        return self._broken

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Queue one notification frame. Never blocks; dropped after :meth:`close`."""
        if not self._open:
            return
        frame = orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params})
        self._push(frame + b"\n")

    def raw(self, data: bytes) -> None:
        """Queue raw bytes (fault injection: lines that are not JSON)."""
        if self._open:
            self._push(data)

    def _push(self, data: bytes) -> None:
        self._chunks.append(data)
        self._queued_bytes += len(data)
        self._enqueued += 1
        self._wake.set()

    async def flush(self) -> None:
        """Return once everything queued before this call was written (or writing failed)."""
        target = self._enqueued
        while self._written < target and not self._broken:
            await self._progress.wait()

    async def wait_writable(self) -> None:
        """Block while more than the high-water mark is queued (backpressure)."""
        while self._queued_bytes > self._high_water and not self._broken:
            await self._progress.wait()

    def close(self) -> None:
        """Stop accepting notifications; what is already queued is still written."""
        self._open = False

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write queued frames until cancelled or the connection breaks."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self._before_write is not None:
                self._before_write()
            chunks, self._chunks = self._chunks, []
            count, self._queued_bytes = len(chunks), 0
            if not chunks:
                continue
            try:
                await self._connection.send_raw(b"".join(chunks))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, TransportClosedError):
                # the client went away (a broken pipe, or end of input closed the connection)
                self._broken = True
                self._progress.set()
                return
            self._written += count
            self.frames_written += count
            self.writes += 1
            progress, self._progress = self._progress, trio.Event()
            progress.set()


class OneLineAtATime(trio.abc.ReceiveStream):
    """Wraps a receive stream so that each ``receive_some`` returns at most one line."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = b""
        self._position = 0

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next line (or the rest of a chunk without a newline); ``b""`` at end of file."""
        if self._position >= len(self._buffer):
            data = await self._stream.receive_some(max_bytes)
            if not data:
                return b""
            self._buffer, self._position = bytes(data), 0
        else:
            await trio.lowlevel.checkpoint()  # the previous line's handler starts first
        start = self._position
        end = self._buffer.find(b"\n", start)
        self._position = len(self._buffer) if end < 0 else end + 1
        if start == 0 and self._position == len(self._buffer):
            return self._buffer
        return self._buffer[start:self._position]

    async def aclose(self) -> None:
        await self._stream.aclose()
