"""CPU per item of the pool and batch layers, on simulator processes (issue 18: under 30 µs).

Three modes run the same N trivial prompts on R simulator processes
(``python -m dsh_orchestra.testing sim``, default reply, no delay), 4 in flight per runtime:

* ``session``: R ``open_runtime`` runtimes, 4R tasks taking items and calling
  ``runtime.session().run(prompt)`` (the floor: session layer, transport, trio);
* ``pool``: ``open_pool(spec, R)`` and ``pool.run_prompt(prompt)`` from 4R tasks;
* ``batch``: ``run_batch(dataset, out, spec, BatchOptions(runtimes=R, progress="none"))``
  (dataset streaming, the pool executor, results lines written and flushed, the summary).

CPU is ``time.process_time()`` of this process only (the simulators are other processes).
Fixed costs (starting runtimes, imports) are removed by running each mode at two sizes and
taking the slope: (CPU(N2) - CPU(N1)) / (N2 - N1). The layer cost is a mode's slope minus the
``session`` slope. One trial per invocation::

    python bench/layers_cpu.py --mode batch --items 500
    python bench/layers_cpu.py --runs 3            # every mode at both sizes, rotated; medians
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
MODES = ("session", "pool", "batch")


def trial(mode: str, items: int, runtimes: int) -> float:
    import trio

    from dsh_orchestra import BatchOptions, RuntimeSpec, open_pool, open_runtime, run_batch

    with tempfile.TemporaryDirectory() as home:
        spec = RuntimeSpec.simulator(dsh_home=home, cwd=home)
        if mode == "batch":
            dataset = Path(home) / "data.jsonl"
            dataset.write_text("".join(json.dumps({"id": f"i{n}", "prompt": "hi"}) + "\n" for n in range(items)))
            cpu = time.process_time()
            summary = trio.run(run_batch, dataset, Path(home) / "out.jsonl", spec,
                               BatchOptions(runtimes=runtimes, progress="none"))
            cpu = time.process_time() - cpu
            assert summary.ok == items, summary
            return cpu

        async def main() -> float:
            todo = iter(range(items))
            done = 0

            async def worker(run: Any) -> None:
                nonlocal done
                for _ in todo:
                    result = await run()
                    assert result.ok
                    done += 1

            cpu = time.process_time()
            if mode == "pool":
                async with open_pool(spec, runtimes) as pool:
                    async with trio.open_nursery() as nursery:
                        for _ in range(4 * runtimes):
                            nursery.start_soon(worker, lambda: pool.run_prompt("hi"))
            else:
                async with trio.open_nursery() as outer:
                    opened: list[Any] = []

                    async def keep(index: int, ready: trio.Event) -> None:
                        async with open_runtime(spec.evolve(name=f"sim#{index}")) as runtime:
                            opened.append(runtime)
                            ready.set()
                            await trio.sleep_forever()

                    for index in range(runtimes):
                        ready = trio.Event()
                        outer.start_soon(keep, index, ready)
                        await ready.wait()
                    async with trio.open_nursery() as nursery:
                        for index in range(4 * runtimes):
                            runtime = opened[index % runtimes]
                            nursery.start_soon(worker, lambda runtime=runtime: runtime.session().run("hi"))
                    outer.cancel_scope.cancel()
            assert done == items
            return time.process_time() - cpu

        return trio.run(main)


def many(runs: int, small: int, large: int, runtimes: int) -> None:
    figures: dict[str, list[float]] = {mode: [] for mode in MODES}
    load_before = os.getloadavg()[0]
    print(json.dumps({"load_1m_before": load_before}), flush=True)
    for index in range(runs):
        order = MODES[index % len(MODES):] + MODES[: index % len(MODES)]
        for mode in order:
            cpu = {}
            for items in (small, large):
                done = subprocess.run([sys.executable, __file__, "--mode", mode, "--items", str(items),
                                       "--runtimes", str(runtimes)], capture_output=True, text=True, check=True)
                cpu[items] = json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"]
            slope = (cpu[large] - cpu[small]) / (large - small) * 1e6
            figures[mode].append(slope)
            print(json.dumps({"round": index, "mode": mode, "cpu_s": cpu, "us_per_item": slope,
                              "load_1m": os.getloadavg()[0]}), flush=True)
    medians = {mode: statistics.median(values) for mode, values in figures.items()}
    print(json.dumps({"summary": True, "runs": runs, "items": [small, large], "runtimes": runtimes,
                      "us_per_item_median": medians,
                      "pool_layer_us": medians["pool"] - medians["session"],
                      "batch_and_pool_layers_us": medians["batch"] - medians["session"],
                      "load_1m_after": os.getloadavg()[0]}))
    print(f"\n**Layers CPU** ({runs} rounds, slope between {small} and {large} items, {runtimes} simulator "
          f"processes; load {load_before:.2f} before, {os.getloadavg()[0]:.2f} after)\n")
    print("| mode | CPU µs per item (median, trials) | layer cost over `session` (median) |")
    print("|---|---:|---:|")
    for mode in MODES:
        trials = " / ".join(f"{v:,.0f}" for v in figures[mode])
        layer = "—" if mode == "session" else f"{medians[mode] - medians['session']:,.1f} µs"
        print(f"| `{mode}` | {medians[mode]:,.1f} ({trials}) | {layer} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES)
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--runtimes", type=int, default=2)
    parser.add_argument("--runs", type=int, help="every mode at --small and --large items, N rounds")
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--large", type=int, default=1500)
    args = parser.parse_args()
    if args.runs:
        many(args.runs, args.small, args.large, args.runtimes)
    elif args.mode:
        print(json.dumps({"mode": args.mode, "items": args.items, "cpu_s": trial(args.mode, args.items, args.runtimes)}))
    else:
        parser.error("give --mode or --runs")


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    main()
