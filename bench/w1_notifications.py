"""W1: notification throughput, one subscriber, against the fake runtime process.

One trial per invocation, printed as one JSON line::

    python bench/w1_notifications.py --client ours-batch --count 100000

Clients:

* ``bare``: blocking ``readline`` + ``json.loads`` loop on the process's stdout (the floor);
* ``bare-orjson``: the same loop with ``orjson.loads`` (the parsing floor of our design);
* ``official``: ``deepseek_harness.client.HarnessClient`` (its reader thread, one
  ``subscribe_notifications`` subscription, ``next()`` per notification);
* ``ours``: ``dsh_orchestra.transport.Connection`` over the process pipes, one
  ``Subscription``, ``await receive()`` per notification;
* ``ours-batch``: the same, consumed with ``await receive_batch()``;
* ``ours-typed``: ``ours-batch`` plus structuring every notification into
  ``SessionEventParams`` (what a typed consumer pays on top).

The clock starts just before the ``bench/blast`` request is written and stops when the
consumer holds the last notification. CPU is ``time.process_time()`` of this client process
(all its threads) over the same window; the fake runtime's own CPU is not counted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import BLAST, REPO_DIR, fake_runtime_command

CLIENTS = ("bare", "bare-orjson", "official", "ours", "ours-batch", "ours-typed")


def run_bare(count: int, loads: Any = json.loads) -> tuple[float, float]:
    with subprocess.Popen(fake_runtime_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        request = json.dumps({"jsonrpc": "2.0", "id": 1, "method": BLAST, "params": {"count": count}})
        wall, cpu = time.perf_counter(), time.process_time()
        proc.stdin.write(request.encode() + b"\n")
        proc.stdin.flush()
        received = 0
        readline = proc.stdout.readline
        while received < count:
            line = readline()
            if not line:
                raise RuntimeError("fake runtime closed early")
            if "method" in loads(line):
                received += 1
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        proc.stdin.close()
        proc.wait(timeout=10)
    return wall, cpu


def run_official(count: int) -> tuple[float, float]:
    from deepseek_harness.client import HarnessClient, HarnessConfig
    from pydantic import BaseModel

    class Empty(BaseModel):
        pass

    with tempfile.TemporaryDirectory() as home:
        client = HarnessClient(
            HarnessConfig(dsh_home=home, cwd=str(REPO_DIR)), _launch_args=fake_runtime_command()
        )
        client.start()
        try:
            subscription = client.subscribe_notifications()
            wall, cpu = time.perf_counter(), time.process_time()
            client.request(BLAST, {"count": count}, response_model=Empty)
            for _ in range(count):
                subscription.next()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            client.close()
    return wall, cpu


def run_ours(count: int, mode: str) -> tuple[float, float]:
    import trio

    from dsh_orchestra.protocol import SESSION_EVENT, SessionEventParams, structure
    from dsh_orchestra.transport import Connection

    async def main() -> tuple[float, float]:
        process = await trio.lowlevel.open_process(
            list(fake_runtime_command()), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            stream = trio.StapledStream(process.stdin, process.stdout)
            async with trio.open_nursery() as nursery:
                connection = Connection(stream, name="fake-runtime")
                await nursery.start(connection.run)
                subscription = connection.subscribe("w1", capacity=count + 1)
                wall, cpu = time.perf_counter(), time.process_time()
                await connection.request(BLAST, {"count": count})
                received = 0
                if mode == "ours":
                    receive = subscription.receive
                    for _ in range(count):
                        await receive()
                    received = count
                else:
                    receive_batch = subscription.receive_batch
                    while received < count:
                        batch = await receive_batch()
                        if mode == "ours-typed":
                            for notification in batch:
                                structure(notification.params, SessionEventParams, method=SESSION_EVENT)
                        received += len(batch)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                connection.close()
            return wall, cpu
        finally:
            await reap(process)

    return trio.run(main)


async def reap(process: Any) -> None:
    """Close stdin and wait for the exit; kill after 5 s. The process is always reaped."""
    import trio

    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            await process.stdin.aclose()
        with trio.move_on_after(5):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--count", type=int, default=100_000)
    args = parser.parse_args()
    if args.client == "bare":
        wall, cpu = run_bare(args.count)
    elif args.client == "bare-orjson":
        import orjson

        wall, cpu = run_bare(args.count, orjson.loads)
    elif args.client == "official":
        wall, cpu = run_official(args.count)
    else:
        wall, cpu = run_ours(args.count, args.client)
    print(json.dumps({
        "workload": "W1", "client": args.client, "count": args.count, "seconds": wall,
        "cpu_seconds": cpu, "rate": args.count / wall, "cpu_per_100k": cpu * 100_000 / args.count,
    }))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_DIR))
    main()
