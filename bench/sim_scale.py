"""Simulator scale: one simulator process holding N concurrent sessions, each taking one turn.

Drives ``python -m dsh_orchestra.testing sim`` (a real process on stdio) through our own runtime
actor and session layer: all N sessions are prompted at once and each waits with session/wait.
Reports wall time, turns per second, and the simulator process's RSS growth per session
(psutil, RSS after the turns minus RSS after the handshake). Not a test: run it by hand.

    python bench/sim_scale.py --sessions 1000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import psutil
import trio

from dsh_orchestra import RuntimeSpec, open_runtime


async def trial(sessions: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as home:
        spec = RuntimeSpec.simulator(dsh_home=home, cwd=home)
        async with open_runtime(spec) as runtime:
            process = psutil.Process(runtime.actor.pid)
            rss_before = process.memory_info().rss
            cpu_before = sum(process.cpu_times()[:2])
            started = time.perf_counter()
            finished = 0

            async def one(index: int) -> None:
                nonlocal finished
                result = await runtime.session(f"scale-{index}").run("hello")
                assert result.finish_reason == "completed", result.finish_reason
                finished += 1

            async with trio.open_nursery() as nursery:
                for index in range(sessions):
                    nursery.start_soon(one, index)
            wall = time.perf_counter() - started
            rss_after = process.memory_info().rss
            cpu = sum(process.cpu_times()[:2]) - cpu_before
            assert finished == sessions
    return {
        "wall_s": wall,
        "turns_per_s": sessions / wall,
        "sim_cpu_s": cpu,
        "rss_growth_mib": (rss_after - rss_before) / 2**20,
        "kib_per_session": (rss_after - rss_before) / 1024 / sessions,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f}, python {sys.version.split()[0]}")
    results = [trio.run(trial, args.sessions) for _ in range(args.runs)]
    for key in results[0]:
        values = [r[key] for r in results]
        print(f"{key:>16}: median {statistics.median(values):10.2f}   runs {', '.join(f'{v:.2f}' for v in values)}")
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
