"""W3: many sessions at once. 200 sessions, each one prompt of 50 events, all prompted together.

The peer is bench/w3_fake_runtime.py (a separate process; its CPU is not counted). One trial
per invocation, printed as one JSON line::

    python bench/w3_sessions.py --client ours --sessions 200 --events 50

Clients:

* ``ours``: ``open_runtime`` + one trio task per session calling ``session.run(prompt)``
  (subscribe, ``session/prompt``, ``session/wait``, collect a ``TurnResult``);
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
CLIENTS = ("ours", "official")


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
    runner = run_ours if client == "ours" else run_official
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
