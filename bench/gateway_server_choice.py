"""Which HTTP server the gateway uses: h11 on trio sockets or hypercorn's trio worker.

Both serve the same fixed SSE answer (12 frames, like a short model reply) on 127.0.0.1; an
httpx client on trio posts a 4 KiB body and reads the stream; per-request latency p50/p99 at
1 and 64 concurrent streams. Run: ``.venv/bin/python bench/gateway_server_choice.py``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import httpx
import trio

from dsh_orchestra.gateway._http import Peer

FRAMES = [f"event: content_block_delta\ndata: {json.dumps({'type': 'content_block_delta', 'index': 0, 'delta': {'type': 'text_delta', 'text': 'x' * 64}})}\n\n".encode() for _ in range(12)]
BODY = json.dumps({"messages": [{"role": "user", "content": "y" * 4000}]}).encode()


async def h11_handler(stream: trio.SocketStream) -> None:
    peer = Peer(stream)
    try:
        while await peer.receive() is not None:
            await peer.start(200, [(b"content-type", b"text/event-stream")])
            for frame in FRAMES:
                await peer.send(frame)
            await peer.end()
            if not peer.reusable():
                break
    except trio.BrokenResourceError:
        pass
    finally:
        await stream.aclose()


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    for frame in FRAMES:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def load(url: str, streams: int, total: int) -> list[float]:
    latencies: list[float] = []
    async with httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=streams)) as client:
        async def worker(count: int) -> None:
            for _ in range(count):
                start = time.perf_counter()
                async with client.stream("POST", url, content=BODY) as response:
                    async for _chunk in response.aiter_raw():
                        pass
                latencies.append(time.perf_counter() - start)
        async with trio.open_nursery() as nursery:
            for _ in range(streams):
                nursery.start_soon(worker, total // streams)
    return latencies


def report(name: str, streams: int, latencies: list[float]) -> None:
    q = statistics.quantiles(latencies, n=100)
    print(f"{name:10} streams={streams:3} n={len(latencies):5} p50={q[49] * 1000:.2f} ms p99={q[98] * 1000:.2f} ms")


async def main() -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, h11_handler, listeners)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        config.errorlog = None
        binds = await nursery.start(serve, asgi_app, config)  # type: ignore[arg-type]
        hyper = binds[0]
        for streams, total in ((1, 1000), (64, 3200)):
            for name, url in (("h11", f"http://127.0.0.1:{port}/v1/messages"), ("hypercorn", f"{hyper}/v1/messages")):
                await load(url, streams, min(total, 200))  # warm up
                report(name, streams, await load(url, streams, total))
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    print(sys.version.split()[0], "trio", trio.__version__, "httpx", httpx.__version__)
    trio.run(main)
