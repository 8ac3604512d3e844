"""Helpers of the connection tests: a scripted peer at the runtime's end of a memory stream
pair (``Peer``) and what the ``wired`` fixture (conftest.py) gives a test (``Wired``)."""

from __future__ import annotations

from collections import deque
from typing import Any

import attrs
import trio

from dsh_orchestra.protocol import LineFramer, encode_frame, notification_frame, result_frame
from dsh_orchestra.transport import Connection


class Peer:
    """The runtime's end of the pair: reads the frames we write, writes frames to us."""

    def __init__(self, stream: trio.abc.HalfCloseableStream) -> None:
        self.stream = stream
        self._framer = LineFramer()
        self._frames: deque[dict[str, Any]] = deque()

    async def receive(self) -> dict[str, Any]:
        """The next frame the connection wrote."""
        while not self._frames:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError("the connection closed its end")
            self._framer.receive_data(data)
            self._frames.extend(self._framer.frames())
        return self._frames.popleft()

    async def send(self, *frames: dict[str, Any]) -> None:
        """Write ``frames`` in one chunk."""
        await self.stream.send_all(b"".join(encode_frame(frame) for frame in frames))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send(notification_frame(method, params))

    async def answer(self, result: Any = None) -> dict[str, Any]:
        """Read the next request and answer it with ``result`` (``{}`` by default)."""
        request = await self.receive()
        await self.send(result_frame(request["id"], {} if result is None else result))
        return request

    async def drain(self, into: list[dict[str, Any]] | None = None) -> None:
        """Read (and keep, if asked) everything the connection writes, until it hangs up."""
        try:
            while True:
                frame = await self.receive()
                if into is not None:
                    into.append(frame)
        except (EOFError, trio.ClosedResourceError, trio.BrokenResourceError):
            pass


@attrs.define
class Wired:
    connection: Connection
    peer: Peer
    stream: trio.StapledStream[Any, Any]


class Callback:
    """A reply target calling ``callback(token, reply)`` (what ``start_request`` took)."""

    def __init__(self, callback: Any, token: Any = None) -> None:
        self.callback = callback
        self.token = token

    def wake(self, reply: dict[str, Any] | None = None) -> None:
        self.callback(self.token, reply)


async def start_request(connection: Connection, method: str, params: Any, callback: Any, token: Any = None) -> int:
    """``send_request`` with a callback target."""
    return await connection.send_request(method, params, Callback(callback, token))
