"""Pool and batch on the simulator: throughput, orchestrator CPU per item, peak RSS, scaling.

Every trial is a fresh process (so ``ru_maxrss`` is that trial's peak) running
``run_batch`` over a generated dataset on ``--runtimes`` simulator *processes*
(``python -m dsh_orchestra.testing sim``, fresh DSH_HOME, telemetry disabled). Measured in the
trial process around the ``run_batch`` call:

* wall time (``time.perf_counter``; runtime start-up included) and items/s;
* orchestrator CPU (``time.process_time``: this process only, every thread; the simulator
  processes are not in it) per item; their CPU (``RUSAGE_CHILDREN``) is reported apart;
* peak RSS (``ru_maxrss``) and its growth over the baseline taken just before ``run_batch``
  (interpreter, imports; the dataset file is written but not loaded).

Every trial checks its results: one line per id, all ``ok``.

    python bench/batch_sim.py                      # the whole "Pool and batch" sim section, 3 runs each
    python bench/batch_sim.py --one 10000 --runtimes 4 [--delay 0]   # one trial, one JSON line
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _common import machine  # noqa: E402


def script_text(delay: float) -> str:
    text = 'default_reply = "answer"\n'
    if delay > 0:
        text += f'\n[[rules]]\nname = "latency"\nreply = "answer"\ndelay = {delay}\n'
    return text


def maxrss_kib(who: int = resource.RUSAGE_SELF) -> int:
    return resource.getrusage(who).ru_maxrss


def one_trial(items: int, runtimes: int, delay: float) -> dict[str, Any]:
    import orjson
    import trio

    from dsh_orchestra.batch import BatchOptions, run_batch
    from dsh_orchestra.runtime import RuntimeSpec

    with tempfile.TemporaryDirectory(prefix="bench-batch-sim-") as tmp:
        root = Path(tmp)
        dataset = root / "ds.jsonl"
        with open(dataset, "wb") as handle:
            for i in range(items):
                handle.write(orjson.dumps({"id": f"item-{i:06d}", "prompt": f"question {i}", "metadata": {"i": i}}) + b"\n")
        script = root / "script.toml"
        script.write_text(script_text(delay))
        home = root / "home"
        home.mkdir()
        spec = RuntimeSpec.simulator(script=script, dsh_home=home, cwd=root, env={"DSH_TELEMETRY_MODE": "DISABLED"})
        out = root / "results.jsonl"
        options = BatchOptions(runtimes=runtimes, progress="none", retries=0)
        baseline = maxrss_kib()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        summary = trio.run(run_batch, dataset, out, spec, options)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        peak = maxrss_kib()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        ids = set()
        with open(out, "rb") as handle:
            for line in handle:
                result = orjson.loads(line)
                if result["status"] != "ok":
                    raise AssertionError(f"item {result['id']} ended {result['status']}: {result['error']}")
                ids.add(result["id"])
        if len(ids) != items or summary.ok != items:
            raise AssertionError(f"{len(ids)} results for {items} items")
    return {
        "items": items, "runtimes": runtimes, "delay_s": delay, "wall_s": round(wall, 3),
        "items_per_s": round(items / wall, 1), "summary_items_per_s": round(summary.items_per_s, 1),
        "cpu_s": round(cpu, 3), "cpu_per_item_us": round(cpu / items * 1e6, 1),
        "runtimes_cpu_s": round(children.ru_utime + children.ru_stime, 3),
        "peak_rss_mib": round(peak / 1024, 1), "baseline_rss_mib": round(baseline / 1024, 1),
        "rss_growth_mib": round((peak - baseline) / 1024, 1), "p50_s": summary.p50_s, "p95_s": summary.p95_s,
    }


def spawn_trial(items: int, runtimes: int, delay: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--one", str(items), "--runtimes", str(runtimes), "--delay", str(delay)]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"trial {command} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def medians(trials: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ["wall_s", "items_per_s", "cpu_per_item_us", "runtimes_cpu_s", "peak_rss_mib", "rss_growth_mib"]
    return {k: round(statistics.median(t[k] for t in trials), 2) for k in keys}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", type=int, metavar="ITEMS", help="run one trial in this process")
    parser.add_argument("--runtimes", type=int, default=4)
    parser.add_argument("--delay", type=float, default=0.0, help="simulated model latency per item (s)")
    parser.add_argument("--runs", type=int, default=3, help="trials per configuration (medians)")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_trial(args.one, args.runtimes, args.delay)))
        return
    plan = [
        ("big", 10_000, 4, 0.0),
        ("small", 1_000, 4, 0.0),
        *((f"scale-cpu-{r}", 2_000, r, 0.0) for r in (1, 2, 4)),
        *((f"scale-latency-{r}", 1_000, r, 0.05) for r in (1, 2, 4)),
    ]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in plan}
    for run in range(args.runs):  # interleaved: a slow spell of the machine hits every configuration
        for name, items, runtimes, delay in plan:
            trial = spawn_trial(items, runtimes, delay)
            trial["config"], trial["run"] = name, run
            results[name].append(trial)
            print(json.dumps(trial), flush=True)
    summary = {name: medians(trials) for name, trials in results.items()}
    for kind in ("cpu", "latency"):
        base = summary[f"scale-{kind}-1"]["items_per_s"]
        for r in (2, 4):
            summary[f"scale-{kind}-{r}"]["speedup_vs_1"] = round(summary[f"scale-{kind}-{r}"]["items_per_s"] / base, 2)
    summary["rss_10k_over_1k"] = round(summary["big"]["peak_rss_mib"] / summary["small"]["peak_rss_mib"], 3)
    print(json.dumps({"summary": summary, "machine": machine(), "runs": args.runs}, indent=2))


if __name__ == "__main__":
    main()
