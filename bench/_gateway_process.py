"""A model gateway in a process of its own, for bench/gateway.py.

    python bench/_gateway_process.py UPSTREAM [MODEL_CONCURRENCY]

Prints ``listening URL TOKEN`` once bound, serves until SIGTERM or SIGINT.

``GATEWAY_BENCH_TRACE=PATH``: time each call inside the gateway (wrapping ``Peer.receive``, the
upstream call and its chunks (``UpstreamClient.post`` and ``Answer.chunks``; in versions before
them ``httpx.AsyncClient.send`` and ``httpx.Response.aiter_raw``) and ``Peer._send``): ``in`` is
the request read to the upstream request started, ``out`` the last upstream chunk received to
the end of the answer written; each SIGUSR1 writes the
calls timed since the last one to ``PATH.N`` (N = 1, 2, ...; JSON, seconds) and starts afresh.
Both spans are the gateway's own work on a call's critical path; what the client sees beyond
them (and beyond the model) is waiting: for the gateway to be scheduled, and in sockets.
"""

from __future__ import annotations

import contextvars
import json
import os
import signal
import sys
import time
from typing import Any

import h11
import httpx
import trio

from dsh_orchestra.gateway import Gateway, GatewayOptions
from dsh_orchestra.gateway._http import Peer

_CALL: contextvars.ContextVar[dict[str, float]] = contextvars.ContextVar("call")
_TIMED: list[tuple[float, float]] = []


def _upstream() -> tuple[Any, str, Any, str]:
    """The upstream call and its chunk iterator: (owner, name) of each, in this version."""
    try:
        from dsh_orchestra.gateway._upstream import Answer, UpstreamClient
    except ImportError:  # before the httpcore pool (stop 35 and earlier): the httpx client
        return httpx.AsyncClient, "send", httpx.Response, "aiter_raw"
    return UpstreamClient, "post", Answer, "chunks"


def _trace() -> None:
    """Wrap the four points of a call (see the module docstring)."""
    clock = time.perf_counter
    sender, send_name, answer, chunks_name = _upstream()
    receive, send, aiter_raw, write = Peer.receive, getattr(sender, send_name), getattr(answer, chunks_name), Peer._send

    async def timed_receive(self: Peer) -> Any:
        received = await receive(self)
        _CALL.set({"read": clock()})
        return received

    async def timed_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        _CALL.get({})["sent"] = clock()
        return await send(self, *args, **kwargs)

    async def timed_aiter_raw(self: Any, *args: Any, **kwargs: Any) -> Any:
        call = _CALL.get({})
        async for chunk in aiter_raw(self, *args, **kwargs):
            call["last"] = clock()
            yield chunk

    async def timed_write(self: Peer, *events: Any) -> None:
        await write(self, *events)
        call = _CALL.get({})
        if events and isinstance(events[-1], h11.EndOfMessage) and "sent" in call and "last" in call:
            _TIMED.append((call["sent"] - call["read"], clock() - call["last"]))

    Peer.receive, Peer._send = timed_receive, timed_write  # type: ignore[method-assign,assignment]
    setattr(sender, send_name, timed_send)
    setattr(answer, chunks_name, timed_aiter_raw)


async def main(upstream: str, concurrency: str) -> None:
    trace = os.environ.get("GATEWAY_BENCH_TRACE", "").replace("{pid}", str(os.getpid()))
    if trace:
        _trace()
    gateway = Gateway(GatewayOptions(model_concurrency=concurrency), upstream=upstream, api_key="k")
    dumps = 0
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGUSR1) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(gateway.run)
            print(f"listening {gateway.base_url} {gateway.token}", flush=True)
            async for signum in signals:
                if signum != signal.SIGUSR1:
                    break
                dumps += 1
                if trace:
                    await trio.Path(f"{trace}.tmp").write_text(json.dumps(_TIMED))
                    os.replace(f"{trace}.tmp", f"{trace}.{dumps}")
                    _TIMED.clear()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "128")
