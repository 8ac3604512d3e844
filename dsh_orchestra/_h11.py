"""Reading one HTTP/1.1 request with h11 over a trio stream: shared by the model gateway and
the scripted model server (both loopback servers of the same small shape)."""

from __future__ import annotations

import h11
import trio

MAX_BODY = 64 * 1024 * 1024
"""The largest request body read (bytes); a larger one is reported as body None."""


async def receive_request(stream: trio.SocketStream, connection: h11.Connection, *,
                          max_body: int = MAX_BODY) -> tuple[h11.Request, bytes | None] | None:
    """One request; None at a clean end of the connection (closed, or paused after the
    client's half-close); body None when it is over ``max_body`` (the unread rest makes h11
    close the connection after the answer)."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await stream.receive_some(65536))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:
                assert request is not None
                return request, None
        elif isinstance(event, h11.EndOfMessage):
            assert request is not None
            return request, bytes(body)
        else:
            return None
