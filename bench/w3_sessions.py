"""W3: many sessions at once. 200 sessions, each one prompt of 50 events, all prompted together.

The peer is bench/w3_fake_runtime.py (a separate process; its CPU is not counted). One trial
per invocation, printed as one JSON line::

    python bench/w3_sessions.py --client ours --sessions 200 --events 50

Clients:

* ``ours``: ``open_runtime`` + one trio task per session calling ``session.run(prompt)``
  (subscribe, ``session/prompt``, ``session/wait``, collect a ``TurnResult``);
* ``minimal``: the floor of a trio client keeping the same results: the process pipes, one
  reader task (``os.read``, split, ``orjson.loads``) waking per-request ``trio.Event``s, one
  task per session sending ``session/prompt`` then ``session/wait`` and keeping its session's
  events as compact JSON (what ours keeps), nothing else (no validation, routing or errors);
* ``minimal-drop``: the same, keeping no events (what receiving alone costs);
* ``official``: ``deepseek_harness.DeepSeekHarness`` (0.2.1rc2) + one thread per session
  calling ``harness.start_session().run(prompt)`` (its subscription, ``session_prompt``,
  reading until the root's first idle; it does not call ``session/wait``).

Measured over the same window, from just before the first prompt to the last result:
wall time (``time.perf_counter``), client CPU (``time.process_time``: this process, all
threads, not the fake runtime) and peak RSS growth (``ru_maxrss`` after minus before; the
runtime is already started and greeted before the window opens). Every result is checked:
final response ``done <session id>``, ``completed``, 48 root events of its own session.

``--runs N`` instead runs N trials of each client in fresh processes, alternating, and prints
one JSON line per trial plus a summary line with medians and ratios (ours / official).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
FAKE = BENCH_DIR / "w3_fake_runtime.py"
CLIENTS = ("ours", "official", "minimal", "minimal-drop")


def fake_command(events: int) -> tuple[str, ...]:
    return (sys.executable, str(FAKE), "--events", str(events))


def maxrss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def check(session_id: str, final: str, finish: str | None, events: list[Any], expected_events: int) -> None:
    if final != f"done {session_id}" or finish != "completed" or len(events) != expected_events:
        raise AssertionError(f"bad result for {session_id}: {final!r} {finish!r} {len(events)} events")


def run_ours(sessions: int, events: int) -> dict[str, Any]:
    import trio

    from dsh_orchestra.runtime import RuntimeSpec
    from dsh_orchestra.session import open_runtime

    async def main(home: str) -> dict[str, Any]:
        spec = RuntimeSpec(command=fake_command(events), dsh_home=home, cwd=home, name="w3-fake")
        async with open_runtime(spec) as runtime:
            handles = [runtime.session(f"w3-{index:04d}") for index in range(sessions)]
            results: dict[str, Any] = {}

            async def one(session: Any) -> None:
                results[session.id] = await session.run(f"prompt for {session.id}")

            rss, cpu, wall = maxrss_kib(), time.process_time(), time.perf_counter()
            async with trio.open_nursery() as nursery:
                for session in handles:
                    nursery.start_soon(one, session)
            wall, cpu, growth = time.perf_counter() - wall, time.process_time() - cpu, maxrss_kib() - rss
        for session_id, result in results.items():
            check(session_id, result.final_response, result.finish_reason, list(result.events), events - 2)
        return {"wall_s": wall, "cpu_s": cpu, "rss_growth_kib": growth, "results": len(results)}

    with tempfile.TemporaryDirectory() as home:
        return trio.run(main, home)


def run_minimal(sessions: int, events: int, keep: bool = True) -> dict[str, Any]:
    import os

    import orjson
    import trio

    async def main() -> dict[str, Any]:
        process = await trio.lowlevel.open_process(list(fake_command(events)), stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        out_fd, in_fd = process.stdout.fileno(), process.stdin.fileno()
        replies: dict[int, Any] = {}
        waiting: dict[int, trio.Event] = {}
        kept: dict[str, list[bytes]] = {}
        ids = iter(range(1, 1 << 30))

        async def reader() -> None:
            tail = b""
            while True:
                await trio.lowlevel.wait_readable(out_fd)
                data = os.read(out_fd, 16384)
                if not data:
                    return
                lines = (tail + data).split(b"\n")
                tail = lines.pop()
                for line in lines:
                    frame = orjson.loads(line)
                    if "method" in frame:
                        params = frame["params"]
                        mine = kept.get(params.get("sessionId"))
                        if keep and mine is not None and frame["method"] == "session.event":
                            mine.append(orjson.dumps(params["event"], option=orjson.OPT_APPEND_NEWLINE)[:-1])
                    else:
                        replies[frame["id"]] = frame
                        waiting.pop(frame["id"]).set()

        async def request(method: str, params: dict[str, Any]) -> Any:
            request_id = next(ids)
            done = waiting[request_id] = trio.Event()
            data = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + b"\n"
            while data:
                try:
                    data = data[os.write(in_fd, data):]
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(in_fd)
            await done.wait()
            return replies.pop(request_id)

        async def one(session_id: str) -> None:
            kept[session_id] = []
            await request("session/prompt", {"sessionId": session_id, "contentBlocks": [
                {"type": "text", "text": f"prompt for {session_id}"}]})
            await request("session/wait", {"sessionId": session_id})

        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(reader)
                await request("initialize", {"cwd": "/", "provider": "x", "model": "y"})
                rss, cpu, wall = maxrss_kib(), time.process_time(), time.perf_counter()
                async with trio.open_nursery() as sessions_nursery:
                    for index in range(sessions):
                        sessions_nursery.start_soon(one, f"w3-{index:04d}")
                wall, cpu, growth = time.perf_counter() - wall, time.process_time() - cpu, maxrss_kib() - rss
                nursery.cancel_scope.cancel()
        finally:
            await process.stdin.aclose()
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        for session_id, lines in kept.items():
            if keep and len(lines) != events - 2:  # its root events, as ours keeps (receipt on, no idle)
                raise AssertionError(f"{session_id}: {len(lines)} events")
        return {"wall_s": wall, "cpu_s": cpu, "rss_growth_kib": growth, "results": len(kept)}

    return trio.run(main)


def run_official(sessions: int, events: int) -> dict[str, Any]:
    from deepseek_harness import DeepSeekHarness

    with tempfile.TemporaryDirectory() as home:
        harness = DeepSeekHarness(dsh_home=home, cwd=home, _launch_args=fake_command(events))
        harness.start()
        try:
            results: dict[str, Any] = {}
            errors: list[BaseException] = []
            barrier = threading.Barrier(sessions + 1)

            def one(index: int) -> None:
                session = harness.start_session(f"w3-{index:04d}")
                barrier.wait()
                try:
                    results[session.id] = session.run(f"prompt for {session.id}")
                except BaseException as exc:  # noqa: BLE001 (reported below)
                    errors.append(exc)

            rss, cpu, wall = maxrss_kib(), time.process_time(), time.perf_counter()
            threads = [threading.Thread(target=one, args=(i,)) for i in range(sessions)]
            for thread in threads:  # one thread per session is the official client's way
                thread.start()
            barrier.wait()  # every thread exists; all prompt at once
            for thread in threads:
                thread.join()
            wall, cpu, growth = time.perf_counter() - wall, time.process_time() - cpu, maxrss_kib() - rss
        finally:
            harness.close()
    if errors:
        raise errors[0]
    for session_id, result in results.items():
        # its events start at the receipt and include the idle-less root events only
        check(session_id, result.final_response, result.finish_reason, result.events, events - 2)
    return {"wall_s": wall, "cpu_s": cpu, "rss_growth_kib": growth, "results": len(results)}


def trial(client: str, sessions: int, events: int) -> dict[str, Any]:
    runner = {"ours": run_ours, "official": run_official, "minimal": run_minimal,
              "minimal-drop": lambda n, e: run_minimal(n, e, keep=False)}[client]
    return {"workload": "W3", "client": client, "sessions": sessions, "events": events, **runner(sessions, events)}


def many(runs: int, sessions: int, events: int) -> None:
    rows: dict[str, list[dict[str, Any]]] = {client: [] for client in CLIENTS}
    for _ in range(runs):
        for client in CLIENTS:
            done = subprocess.run([sys.executable, __file__, "--client", client, "--sessions", str(sessions),
                                   "--events", str(events)], capture_output=True, text=True, check=True)
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows[client].append(row)
            print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {"workload": "W3", "summary": True, "runs": runs, "sessions": sessions, "events": events}
    for key in ("wall_s", "cpu_s", "rss_growth_kib"):
        for client in CLIENTS:
            summary[f"{client}_{key}_median"] = statistics.median(r[key] for r in rows[client])
        summary[f"ratio_{key}"] = summary[f"ours_{key}_median"] / summary[f"official_{key}_median"]
        summary[f"ratio_minimal_{key}"] = summary[f"ours_{key}_median"] / summary[f"minimal_{key}_median"]
        summary[f"ratio_minimal_drop_{key}"] = summary[f"ours_{key}_median"] / max(1, summary[f"minimal-drop_{key}_median"])
    print(json.dumps(summary))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--client", choices=CLIENTS)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--events", type=int, default=50, help="notifications per prompt")
    parser.add_argument("--runs", type=int, help="run N trials of each client in fresh processes")
    args = parser.parse_args()
    if args.runs:
        many(args.runs, args.sessions, args.events)
    elif args.client:
        print(json.dumps(trial(args.client, args.sessions, args.events)))
    else:
        parser.error("give --client or --runs")


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    main()
