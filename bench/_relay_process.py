"""A relay that does no work, in a process of its own: the floor of any proxy, for bench/gateway.py.

    python bench/_relay_process.py UPSTREAM

Copies bytes both ways between each client connection and a connection of its own to UPSTREAM
(``http://HOST:PORT``), on trio like the gateway, with no HTTP parsing, no key check and no
counting. What it adds to a call is what one more process on the path costs on this machine
(its wake-ups and socket hops), which the gateway cannot go below. Prints ``listening URL -``
once bound, serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import signal
import sys
from functools import partial
from urllib.parse import urlsplit

import trio


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    done.cancel()  # one side ended: the connection is over


async def main(upstream: str) -> None:
    target = urlsplit(upstream)
    host, port = target.hostname or "127.0.0.1", target.port or 80

    async def handle(client: trio.SocketStream) -> None:
        server = await trio.open_tcp_stream(host, port)  # trio sets TCP_NODELAY on both
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(_pipe, client, server, nursery.cancel_scope)
            nursery.start_soon(_pipe, server, client, nursery.cancel_scope)

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
            print(f"listening http://127.0.0.1:{listeners[0].socket.getsockname()[1]} -", flush=True)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
