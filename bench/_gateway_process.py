"""A model gateway in a process of its own, for bench/gateway.py.

    python bench/_gateway_process.py UPSTREAM [MODEL_CONCURRENCY]

Prints ``listening URL TOKEN`` once bound, serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import signal
import sys

import trio

from dsh_orchestra.gateway import Gateway, GatewayOptions


async def main(upstream: str, concurrency: str) -> None:
    gateway = Gateway(GatewayOptions(model_concurrency=concurrency), upstream=upstream, api_key="k")
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(gateway.run)
            print(f"listening {gateway.base_url} {gateway.token}", flush=True)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "128")
