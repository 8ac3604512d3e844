"""The gateway's HTTP/1.1 side towards the runtimes: h11 over trio sockets (loopback only).

Owns reading one request and writing responses (whole or streamed); knows nothing of models.
"""

from __future__ import annotations

import json
from typing import Any, Final

import h11
import trio

from .._h11 import MAX_BODY, receive_request

_HOP: Final = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"content-length", b"content-encoding",
                         b"proxy-connection", b"te", b"trailer", b"upgrade"})


class Peer:
    """One runtime's connection: ``receive`` requests, ``start``/``send``/``end`` a response.

    ``queue`` frames response events without writing them: they go out with the next write,
    in the same ``send_all`` (the end of a streamed answer is always written by :meth:`end`).
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.connection = h11.Connection(h11.SERVER)
        self._queued = b""

    async def receive(self) -> tuple[h11.Request, bytes | None] | None:
        """One request; None at a clean end of the connection; body None when over MAX_BODY."""
        return await receive_request(self.stream, self.connection, max_body=MAX_BODY)

    def reusable(self) -> bool:
        """After a response: start the next request cycle if both sides are done."""
        if self.connection.our_state is h11.DONE and self.connection.their_state is h11.DONE:
            self.connection.start_next_cycle()
            return True
        return False

    def queue(self, *events: Any) -> None:
        """Frame ``events`` now; they are written with the next write."""
        send = self.connection.send
        self._queued += b"".join(send(event) or b"" for event in events)

    async def start(self, status: int, headers: list[tuple[bytes, bytes]], data: bytes = b"", *, end: bool = False) -> None:
        """Send the status line and headers of a streamed (chunked) response, and ``data``
        (its first bytes, if any) in the same write; ``end``: the end of the response too."""
        self.queue(h11.Response(status_code=status, headers=headers))
        await self.send(data, end=end)

    async def send(self, data: bytes, *, end: bool = False) -> None:
        """Send ``data`` (if any) as a chunk (and what is queued); ``end``: the end of the response too, in the same write."""
        if data:
            self.queue(h11.Data(data=data))
        if end:
            await self.end()
        else:
            await self._send()

    async def end(self) -> None:
        """The end of the response (after what is queued, in the same write)."""
        await self._send(h11.EndOfMessage())

    async def whole(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
        """Send a complete response with a content-length."""
        head = h11.Response(status_code=status, headers=[*headers, (b"content-length", str(len(body)).encode())])
        await self._send(head, h11.Data(data=body), h11.EndOfMessage()) if body else await self._send(head, h11.EndOfMessage())

    async def error(self, status: int, kind: str, text: str) -> None:
        """An Anthropic-style JSON error: ``{"type":"error","error":{"type","message"}}``."""
        body = json.dumps({"type": "error", "error": {"type": kind, "message": f"dsh-orchestra gateway: {text}"}}).encode()
        await self.whole(status, body, [(b"content-type", b"application/json")])

    async def _send(self, *events: Any) -> None:
        """Frame ``events`` with h11 and write them, after what is queued, in one ``send_all``."""
        send = self.connection.send
        data = b"".join([self._queued, *(send(event) or b"" for event in events)])
        self._queued = b""
        if data:
            await self.stream.send_all(data)


class Relay:
    """The writer of one streamed answer: what the reader hands it (:meth:`start`, :meth:`send`,
    :meth:`end`, none of which wait) goes out in one write as soon as the reader waits.

    The reader (the upstream stream) keeps the chunks already received without a wait for
    each write, so frames that arrived together leave together: one ``send_all`` and one
    wake-up of the runtime instead of one per 64-byte frame, and no chunk waits for a later
    one (the writer runs at the reader's next wait, at the latest when it waits for the
    network). Run :meth:`run` in a task; it returns after the end of the answer is written,
    or at the first failed write (kept in :attr:`error`; the rest is dropped).
    """

    def __init__(self, peer: Peer) -> None:
        self._peer = peer
        self._head: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self._parts: list[bytes] = []
        self._end = False
        self._wake = trio.Event()
        self.error: trio.BrokenResourceError | trio.ClosedResourceError | None = None

    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The status line and headers (written with the data handed with or after them)."""
        self._head = (status, headers)
        self._wake.set()

    def send(self, data: bytes) -> None:
        if data:
            self._parts.append(data)
            self._wake.set()

    def end(self) -> None:
        """The end of the answer (after the data handed before it); :meth:`run` then returns."""
        self._end = True
        self._wake.set()

    async def run(self) -> None:
        peer = self._peer
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            head, parts, end = self._head, self._parts, self._end
            self._head, self._parts = None, []
            data = parts[0] if len(parts) == 1 else b"".join(parts)
            try:
                if head is not None:
                    await peer.start(*head, data, end=end)
                else:
                    await peer.send(data, end=end)  # the end through Peer.end, after the data in the same write
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                self.error = exc
                return
            if end:
                return


def passed_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Response headers (raw pairs) to pass through to the runtime, hop-by-hop ones left out."""
    return [(k.lower(), v) for k, v in headers if k.lower() not in _HOP]


def header(request: h11.Request, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case), decoded."""
    return next((v.decode("latin-1") for k, v in request.headers if k == name), None)
