"""Runtime memory over a long run, with and without recycling (issue 12 item 13).

One ``RuntimePool`` of one runtime, 4 sessions in flight, N one-prompt sessions through
``pool.run_prompt`` (a fresh session each, as a batch item gets). After every ``--every``
sessions: the resident memory of the live runtime's process tree (``runtime_rss_mib``: /proc
``statm`` of the runtime and its descendants), the orchestrator's own RSS, the distinct runtime
processes used so far. Every result is checked (``completed``, the scripted reply).

* ``--runtime real``: the bundled ``dsh --profile sdk`` 0.2.1rc2 against the scripted model
  (``python -m dsh_orchestra.testing fake-model``, its own process), fresh DSH_HOME,
  telemetry disabled;
* ``--runtime sim``: ``python -m dsh_orchestra.testing sim`` processes.

    python bench/recycle_real.py --runtime real --sessions 1000                  # no recycling
    python bench/recycle_real.py --runtime real --sessions 1000 --max-sessions-per-runtime 250
    python bench/recycle_real.py --runtime real --sessions 1000 --max-runtime-rss 400
    python bench/recycle_real.py --runtime sim --sessions 2000

Prints one JSON line per sample and a JSON summary (wall, sessions/s, peak runtime RSS,
runtimes used, recycles, orchestrator RSS, the time the RSS read took, each stretch with no
runtime taking sessions (a replacement starting; polled every 10 ms), load average).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
sys.path.insert(0, str(BENCH_DIR.parent))

from _common import machine  # noqa: E402
from batch_real import API_KEY, ENV, REPLY, start_fake_model  # noqa: E402


def own_rss_mib() -> float:
    with open("/proc/self/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


async def run(args: argparse.Namespace, spec: Any) -> dict[str, Any]:
    import trio

    from dsh_orchestra.pool import open_pool, runtime_rss_mib

    samples: list[dict[str, Any]] = []
    pids: set[int] = set()
    done = 0
    started = 0
    limits: dict[str, Any] = {}
    if args.max_sessions_per_runtime:
        limits["max_sessions_per_runtime"] = args.max_sessions_per_runtime
    if args.max_runtime_rss:
        limits["max_runtime_rss_mib"] = args.max_runtime_rss
    read_s = 0.0
    reads = 0

    async with open_pool(spec, 1, max_sessions=4, **limits) as pool:
        await pool.wait_live()
        t0 = time.perf_counter()

        def sample() -> None:
            nonlocal read_s, reads
            rss = []
            for runtime in pool.runtimes:
                t = time.perf_counter()
                value = runtime_rss_mib(runtime)
                read_s += time.perf_counter() - t
                reads += 1
                if value is not None:
                    rss.append(round(value, 1))
            row = {"sessions": done, "runtime_rss_mib": rss, "orchestrator_rss_mib": round(own_rss_mib(), 1),
                   "runtimes_used": len(pids), "recycled": pool.statistics().recycled,
                   "t_s": round(time.perf_counter() - t0, 2)}
            samples.append(row)
            print(json.dumps(row), flush=True)

        sample()

        async def worker() -> None:
            nonlocal done, started
            while started < args.sessions:
                started += 1
                async with pool.lease() as runtime:
                    if runtime.actor.pid is not None:
                        pids.add(runtime.actor.pid)
                    session = runtime.session()
                    try:
                        result = await session.run(f"question {started}")
                    finally:
                        runtime.forget(session.id)
                if result.finish_reason != "completed" or args.reply not in (None, result.final_response):
                    raise AssertionError(f"{result.finish_reason!r} {result.final_response!r}")
                done += 1
                if done % args.every == 0:
                    sample()

        gaps: list[float] = []

        async def watch_gaps() -> None:  # time with no runtime taking sessions (a replacement starting)
            since: float | None = None
            while True:
                live = pool.statistics().live
                now = time.perf_counter()
                if live == 0 and since is None:
                    since = now
                elif live and since is not None:
                    gaps.append(now - since)
                    since = None
                await trio.sleep(0.01)

        async with trio.open_nursery() as outer:
            outer.start_soon(watch_gaps)
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    nursery.start_soon(worker)
            outer.cancel_scope.cancel()
        wall = time.perf_counter() - t0
        stats = pool.statistics()
    peak = max((max(s["runtime_rss_mib"]) for s in samples if s["runtime_rss_mib"]), default=None)
    return {
        "runtime": args.runtime, "sessions": args.sessions, "limits": limits, "wall_s": round(wall, 2),
        "sessions_per_s": round(args.sessions / wall, 1), "first_rss_mib": samples[0]["runtime_rss_mib"],
        "last_rss_mib": samples[-1]["runtime_rss_mib"], "peak_sampled_runtime_rss_mib": peak,
        "runtimes_used": len(pids), "recycled": stats.recycled, "restarts": stats.restarts,
        "orchestrator_rss_mib": [samples[0]["orchestrator_rss_mib"], samples[-1]["orchestrator_rss_mib"]],
        "rss_read_us": round(read_s / max(reads, 1) * 1e6, 1), "loadavg": os.getloadavg(),
        "no_live_runtime_s": [round(g, 2) for g in gaps],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=("real", "sim"), default="real")
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--max-sessions-per-runtime", type=int, default=0, help="0: no count limit")
    parser.add_argument("--max-runtime-rss", type=float, default=0, help="MiB; 0: no RSS limit")
    args = parser.parse_args()
    os.environ.setdefault("DSH_TELEMETRY_MODE", "DISABLED")
    import trio

    from dsh_orchestra.runtime import RuntimeSpec

    with tempfile.TemporaryDirectory(prefix="bench-recycle-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        (root / "ws").mkdir()
        model = None
        try:
            if args.runtime == "real":
                model, base_url = start_fake_model(root)
                spec = RuntimeSpec(dsh_home=root / "home", cwd=root / "ws", base_url=base_url, api_key=API_KEY,
                                   env=ENV)
                args.reply = REPLY
            else:
                spec = RuntimeSpec.simulator(dsh_home=root / "home", cwd=root / "ws", env=ENV)
                args.reply = None
            load0 = os.getloadavg()
            summary = trio.run(run, args, spec)
        finally:
            if model is not None:
                model.terminate()
                model.wait(timeout=10)
    summary["loadavg_start"] = load0
    summary["machine"] = machine()
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
