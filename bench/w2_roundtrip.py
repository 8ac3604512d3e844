"""W2: sequential request round-trip latency against a peer that answers at once.

One trial per invocation, printed as one JSON line::

    python bench/w2_roundtrip.py --client ours --count 10000

Each round trip is a ``session/resume {"sessionId": "s1"}`` request answered ``{}`` by the
fake runtime, typed on both sides: ``HarnessClient.resume_session`` (pydantic-validated
``{}``) for the official client, ``Connection.request(SESSION_RESUME, ResumeParams(...),
EmptyResult)`` for ours. ``bare`` is a blocking ``write`` + ``flush`` + ``readline`` +
``json.loads`` loop (the floor). Two bare trio loops show what the event loop itself costs:
``trio-bare`` is one task doing ``os.write`` / ``wait_readable`` / ``os.read`` + ``orjson``
(no reader task); ``trio-reader`` adds a reader task that wakes the caller through a
``trio.Event``, the architecture of the connection without any of its code. 200 warm-up
round trips are not counted; every counted round trip is timed on its own with
``time.perf_counter_ns``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from typing import Any

from _common import REPO_DIR, fake_runtime_command, median, percentile

CLIENTS = ("bare", "official", "ours", "trio-bare", "trio-reader")
WARMUP = 200


def summary(samples_ns: list[int]) -> dict[str, Any]:
    micros = [sample / 1000 for sample in samples_ns]
    return {
        "p50_us": median(micros), "p99_us": percentile(micros, 0.99),
        "mean_us": sum(micros) / len(micros), "max_us": max(micros),
    }


def run_bare(count: int) -> list[int]:
    samples: list[int] = []
    with subprocess.Popen(fake_runtime_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        write, flush, readline = proc.stdin.write, proc.stdin.flush, proc.stdout.readline
        clock = time.perf_counter_ns
        for index in range(WARMUP + count):
            line = json.dumps({"jsonrpc": "2.0", "id": index, "method": "session/resume",
                               "params": {"sessionId": "s1"}}, separators=(",", ":"))
            start = clock()
            write(line.encode() + b"\n")
            flush()
            reply = json.loads(readline())
            elapsed = clock() - start
            assert reply["id"] == index
            if index >= WARMUP:
                samples.append(elapsed)
        proc.stdin.close()
        proc.wait(timeout=10)
    return samples


def run_official(count: int) -> list[int]:
    from deepseek_harness.client import HarnessClient, HarnessConfig

    samples: list[int] = []
    with tempfile.TemporaryDirectory() as home:
        client = HarnessClient(
            HarnessConfig(dsh_home=home, cwd=str(REPO_DIR)), _launch_args=fake_runtime_command()
        )
        client.start()
        try:
            clock, resume = time.perf_counter_ns, client.resume_session
            for index in range(WARMUP + count):
                start = clock()
                resume("s1")
                elapsed = clock() - start
                if index >= WARMUP:
                    samples.append(elapsed)
        finally:
            client.close()
    return samples


def run_ours(count: int) -> list[int]:
    import trio

    from dsh_orchestra.protocol import SESSION_RESUME, EmptyResult, ResumeParams
    from dsh_orchestra.transport import Connection
    from w1_notifications import reap

    async def main() -> list[int]:
        samples: list[int] = []
        process = await trio.lowlevel.open_process(
            list(fake_runtime_command()), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            async with trio.open_nursery() as nursery:
                connection = Connection(trio.StapledStream(process.stdin, process.stdout))
                await nursery.start(connection.run)
                clock, request = time.perf_counter_ns, connection.request
                for index in range(WARMUP + count):
                    start = clock()
                    await request(SESSION_RESUME, ResumeParams(session_id="s1"), EmptyResult)
                    elapsed = clock() - start
                    if index >= WARMUP:
                        samples.append(elapsed)
                connection.close()
        finally:
            await reap(process)
        return samples

    return trio.run(main)


def run_trio_floor(count: int, with_reader: bool) -> list[int]:
    import os

    import orjson
    import trio

    from w1_notifications import reap

    async def main() -> list[int]:
        samples: list[int] = []
        process = await trio.lowlevel.open_process(
            list(fake_runtime_command()), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            write_fd, read_fd = process.stdin.fileno(), process.stdout.fileno()
            clock = time.perf_counter_ns
            waiting: dict[int, trio.Event] = {}

            def line(index: int) -> bytes:
                return orjson.dumps({"jsonrpc": "2.0", "id": index, "method": "session/resume",
                                     "params": {"sessionId": "s1"}}) + b"\n"

            async def reader() -> None:
                while True:
                    await trio.lowlevel.wait_readable(read_fd)
                    data = os.read(read_fd, 65536)
                    if not data:
                        return
                    for raw in data.splitlines():
                        waiting.pop(orjson.loads(raw)["id"]).set()

            async with trio.open_nursery() as nursery:
                if with_reader:
                    nursery.start_soon(reader)
                for index in range(WARMUP + count):
                    start = clock()
                    if with_reader:
                        event = waiting[index] = trio.Event()
                        os.write(write_fd, line(index))
                        await event.wait()
                    else:
                        os.write(write_fd, line(index))
                        await trio.lowlevel.wait_readable(read_fd)
                        assert orjson.loads(os.read(read_fd, 65536))["id"] == index
                    elapsed = clock() - start
                    if index >= WARMUP:
                        samples.append(elapsed)
                nursery.cancel_scope.cancel()
        finally:
            await reap(process)
        return samples

    return trio.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--count", type=int, default=10_000)
    args = parser.parse_args()
    runner = {
        "bare": run_bare, "official": run_official, "ours": run_ours,
        "trio-bare": lambda count: run_trio_floor(count, with_reader=False),
        "trio-reader": lambda count: run_trio_floor(count, with_reader=True),
    }[args.client]
    cpu = time.process_time()
    samples = runner(args.count)
    cpu = time.process_time() - cpu
    print(json.dumps({"workload": "W2", "client": args.client, "count": len(samples),
                      "cpu_seconds": cpu, **summary(samples)}))


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_DIR))
    main()
