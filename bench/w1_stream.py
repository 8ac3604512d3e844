"""W1 through the session API: one turn's events streamed to user code, rate and latency.

One trial per invocation, printed as one JSON line::

    python bench/w1_stream.py --client ours --mode rate --count 100000
    python bench/w1_stream.py --client official --mode latency --count 2000 --interval-us 1000

The peer is ``bench/fake_runtime.py``: ``session/prompt`` is answered with a receipt, then the
session's events follow (``blast N``: as fast as the pipe takes them; ``pace N U``: one write
every U µs, each stamped with the sender's ``time.monotonic_ns()``, a clock shared by every
process of the machine).

Clients, each the way its users stream one session:

* ``bare``: blocking ``readline`` + ``orjson.loads`` on the process's stdout (the floor);
* ``trio-bare``: one trio task: ``wait_readable``, ``os.read``, split, ``orjson.loads`` (the
  floor of any trio client: one trip through trio's scheduler per read);
* ``trio-reader``: a reader task as ``trio-bare`` handing each event to a consumer task through
  a deque and a one-shot wake-up (the architecture of a connection with a reader task and
  user code in another task, with none of its code: two trips per event when paced);
* ``trio-api``: the least a trio client handing each event to user code through an awaited
  ``receive()`` that is a cancel point can do (the floor of that API, none of our code): one
  task; per event a tuple (method, params, line) queued in a deque, and ``await receive()`` =
  ``checkpoint_if_cancelled()`` + ``popleft()``; with the deque empty, ``receive()`` itself
  reads and splits a chunk, waiting for the pipe only when it is empty (as ``ours`` does);
* ``official``: ``DeepSeekHarness`` 0.2.1rc2, ``client.subscribe_session_notifications(id)``,
  ``client.session_prompt(...)``, ``subscription.next()`` per notification (its reader thread
  hands each one over through a ``queue.Queue``);
* ``ours``: ``open_runtime``, ``with session.events() as events:``, ``await
  session.prompt(...)``, ``await events.receive()`` per notification.

``rate``: the clock starts just before the prompt is sent and stops when user code holds the
last event; CPU is ``time.process_time()`` of this process (all threads). ``latency``: per
event, the receiver's ``time.monotonic_ns()`` when user code holds it minus the sender's
stamp; p50/p90/p99 over the events after the first 100.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from _common import fake_runtime_command, percentile  # noqa: E402

CLIENTS = ("bare", "trio-bare", "trio-reader", "trio-api", "official", "ours")
SESSION = "w1-session"
WARMUP = 100


def prompt_text(mode: str, count: int, interval_us: int) -> str:
    return f"blast {count}" if mode == "rate" else f"pace {count} {interval_us}"


def figures(mode: str, count: int, wall: float, cpu: float, lags: list[int]) -> dict[str, Any]:
    if mode == "rate":
        return {"seconds": wall, "cpu_seconds": cpu, "rate": count / wall, "cpu_us_per_event": cpu * 1e6 / count}
    kept = [lag / 1000 for lag in lags[WARMUP:]]
    return {"p50_us": percentile(kept, 0.5), "p90_us": percentile(kept, 0.9), "p99_us": percentile(kept, 0.99),
            "cpu_seconds": cpu}


def run_bare(mode: str, count: int, interval_us: int) -> dict[str, Any]:
    import orjson

    with subprocess.Popen(fake_runtime_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        request = {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {
            "sessionId": SESSION, "contentBlocks": [{"type": "text", "text": prompt_text(mode, count, interval_us)}]}}
        lags: list[int] = []
        wall, cpu = time.perf_counter(), time.process_time()
        proc.stdin.write(orjson.dumps(request) + b"\n")
        proc.stdin.flush()
        received = 0
        readline, loads, clock = proc.stdout.readline, orjson.loads, time.monotonic_ns
        while received < count:
            frame = loads(readline())
            if "method" in frame:
                received += 1
                if mode == "latency":
                    lags.append(clock() - frame["params"]["event"]["data"]["sentNs"])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        proc.stdin.close()
        proc.wait(timeout=10)
    return figures(mode, count, wall, cpu, lags)


def run_trio(mode: str, count: int, interval_us: int, *, variant: str) -> dict[str, Any]:
    """``trio-bare`` (variant ``bare``), ``trio-reader`` (``reader``) or ``trio-api`` (``api``)."""
    import os
    from collections import deque

    import orjson
    import trio

    async def main() -> dict[str, Any]:
        process = await trio.lowlevel.open_process(list(fake_runtime_command()), stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        out_fd, in_fd = process.stdout.fileno(), process.stdin.fileno()
        loads, clock = orjson.loads, time.monotonic_ns
        request = {"jsonrpc": "2.0", "id": 1, "method": "session/prompt", "params": {
            "sessionId": SESSION, "contentBlocks": [{"type": "text", "text": prompt_text(mode, count, interval_us)}]}}
        lags: list[int] = []
        items: deque[Any] = deque()
        waiter: list[Any] = [None]
        tail = [b""]

        def deliver(frame: Any) -> None:
            if variant == "reader":
                items.append(frame)
                task, waiter[0] = waiter[0], None
                if task is not None:
                    trio.lowlevel.reschedule(task)
            elif mode == "latency":
                lags.append(clock() - frame["params"]["event"]["data"]["sentNs"])

        async def read(total: int) -> None:
            received = 0
            while received < total:
                await trio.lowlevel.wait_readable(out_fd)
                data = os.read(out_fd, 16384)
                lines = (tail[0] + data).split(b"\n")
                tail[0] = lines.pop()
                for line in lines:
                    frame = loads(line)
                    if "method" in frame:
                        received += 1
                        deliver(frame)

        async def consume(total: int) -> None:
            for _ in range(total):
                while not items:
                    waiter[0] = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)
                frame = items.popleft()
                if mode == "latency":
                    lags.append(clock() - frame["params"]["event"]["data"]["sentNs"])

        def fill() -> bool:  # api: one chunk into the queue, False when the pipe is empty
            try:
                data = os.read(out_fd, 16384)
            except BlockingIOError:
                return False
            lines = (tail[0] + data).split(b"\n")
            tail[0] = lines.pop()
            for line in lines:
                frame = loads(line)
                method = frame.get("method")
                if method is not None:
                    items.append((method, frame["params"], line))
            return True

        async def receive() -> tuple[str, dict[str, Any], bytes]:  # api: the user's call
            await trio.lowlevel.checkpoint_if_cancelled()
            while not items:
                if not fill():
                    await trio.lowlevel.wait_readable(out_fd)
            event: tuple[str, dict[str, Any], bytes] = items.popleft()
            return event

        async def stream(total: int) -> None:  # api: user code
            if mode == "latency":
                for _ in range(total):
                    event = await receive()
                    lags.append(clock() - event[1]["event"]["data"]["sentNs"])
            else:
                for _ in range(total):
                    await receive()

        try:
            wall, cpu = time.perf_counter(), time.process_time()
            os.write(in_fd, orjson.dumps(request) + b"\n")
            if variant == "reader":
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read, count)
                    nursery.start_soon(consume, count)
            elif variant == "api":
                await stream(count)
            else:
                await read(count)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            await process.stdin.aclose()
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        return figures(mode, count, wall, cpu, lags)

    return trio.run(main)


def run_official(mode: str, count: int, interval_us: int) -> dict[str, Any]:
    from deepseek_harness import DeepSeekHarness

    with tempfile.TemporaryDirectory() as home:
        harness = DeepSeekHarness(dsh_home=home, cwd=home, _launch_args=fake_runtime_command())
        harness.start()
        try:
            client = harness.client
            lags: list[int] = []
            clock = time.monotonic_ns
            with client.subscribe_session_notifications(SESSION) as subscription:
                wall, cpu = time.perf_counter(), time.process_time()
                client.session_prompt(SESSION, [{"type": "text", "text": prompt_text(mode, count, interval_us)}],
                                      notification_subscription=subscription)
                for _ in range(count):
                    notification = subscription.next()
                    if mode == "latency":
                        lags.append(clock() - notification.payload["event"]["data"]["sentNs"])
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            harness.close()
    return figures(mode, count, wall, cpu, lags)


def run_ours(mode: str, count: int, interval_us: int) -> dict[str, Any]:
    import trio

    from dsh_orchestra import RuntimeSpec, open_runtime

    async def main(home: str) -> dict[str, Any]:
        spec = RuntimeSpec(command=fake_runtime_command(), dsh_home=home, cwd=home, name="w1-fake")
        async with open_runtime(spec) as runtime:
            session = runtime.session(SESSION)
            lags: list[int] = []
            clock = time.monotonic_ns
            with session.events(capacity=count + 1) as events:
                wall, cpu = time.perf_counter(), time.process_time()
                await session.prompt(prompt_text(mode, count, interval_us))
                receive = events.receive
                if mode == "latency":
                    for _ in range(count):
                        notification = await receive()
                        lags.append(clock() - notification.params["event"]["data"]["sentNs"])
                else:
                    for _ in range(count):
                        await receive()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return figures(mode, count, wall, cpu, lags)

    with tempfile.TemporaryDirectory() as home:
        return trio.run(main, home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS, required=True)
    parser.add_argument("--mode", choices=("rate", "latency"), default="rate")
    parser.add_argument("--count", type=int, help="events (rate: 100,000; latency: 2,000)")
    parser.add_argument("--interval-us", type=int, default=1000, help="latency: µs between paced events")
    args = parser.parse_args()
    count = args.count or (100_000 if args.mode == "rate" else 2_000)
    if args.client.startswith("trio-"):
        out = run_trio(args.mode, count, args.interval_us, variant=args.client.removeprefix("trio-"))
    else:
        runner = {"bare": run_bare, "official": run_official, "ours": run_ours}[args.client]
        out = runner(args.mode, count, args.interval_us)
    print(json.dumps({"workload": f"W1-{args.mode}", "client": args.client, "count": count, **out}))


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    main()
