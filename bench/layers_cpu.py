"""CPU per item of the pool and batch layers, on simulator processes (issue 18: under 30 µs).

Three modes run the same N trivial prompts on R simulator processes
(``python -m dsh_orchestra.testing sim``, default reply, no delay), 4 in flight per runtime
(``--in-flight``):

* ``session``: R ``open_runtime`` runtimes, tasks taking items and calling
  ``runtime.session().run(prompt)`` (the floor: session layer, transport, trio);
* ``pool``: ``open_pool(spec, R)`` and ``pool.run_prompt(prompt)`` from the tasks;
* ``batch``: ``run_batch(dataset, out, spec, BatchOptions(runtimes=R, progress="none"))``
  (dataset streaming, the pool executor, results lines written and flushed, the summary;
  runtimes recycled every 500 sessions as by default, ``LAYERS_RECYCLE_AFTER=N|none``);
* ``batch-canned`` (single trials only): ``run_batch`` whose executor answers every attempt
  in this process with one real simulator turn after ``CANNED_STEPS`` (default 3) trio
  checkpoints: the batch run loop alone, no pool, session layer or runtime.

CPU is ``time.process_time()`` of this process only (the simulators are other processes).
Fixed costs (starting runtimes, imports) are removed by running each mode at two sizes and
taking the slope: (CPU(N2) - CPU(N1)) / (N2 - N1). The layer cost is a mode's slope minus the
``session`` slope. One trial per invocation::

    python bench/layers_cpu.py --mode batch --items 500
    python bench/layers_cpu.py --runs 3            # every mode at both sizes, rotated; medians

Instruction counts (``--callgrind ROUNDS``): every mode at 200 and 1,000 items under
``valgrind --tool=callgrind`` (this process only), one simulator, **one item in flight**, so
that each reply's frames reach the client the same way whatever the machine's load (with
several in flight, frames of different sessions coalesce into reads depending on timing, and
the per-item count moved by ±100k instructions); the dataset is written before the traced
process starts. It ends with native rounds of the same trials to turn instructions into µs
(Ir per µs: each mode's Ir slope over its CPU slope, the median over the modes)::

    python bench/layers_cpu.py --callgrind 2       # about 25 minutes

Those µs include the kernel's share of each item at one in flight (reads, writes, epoll: the
session mode's CPU is about 1 ms per item for 1.5M instructions), which callgrind does not
count. ``--canned R`` measures the batch run loop alone (``batch-canned``, in one process, no
runtime) under callgrind and natively: its Ir per µs is the rate of the layer's own code::

    python bench/layers_cpu.py --canned 5          # about 5 minutes
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
from functools import partial
from pathlib import Path
from typing import Any

import trio

BENCH_DIR = Path(__file__).resolve().parent
MODES = ("session", "pool", "batch")
CANNED = "batch-canned"


def canned_turn(spec: Any) -> Any:
    """One real simulator turn (``TurnResult``) of the prompt "hi", to answer attempts with."""
    import trio

    from dsh_orchestra import open_runtime

    async def one() -> Any:
        async with open_runtime(spec) as runtime:
            return await runtime.session().run("hi")

    return trio.run(one)


class CannedExecutor:
    """``batch-canned``: every attempt answered in this process by one canned turn after
    ``steps`` trio checkpoints (a turn's wake-ups): the batch run loop alone, no pool, no
    session layer, no runtime."""

    def __init__(self, turn: Any, steps: int = 3) -> None:
        self.turn = turn
        self.steps = steps

    def open(self, spec: Any, options: Any) -> Any:
        from contextlib import asynccontextmanager

        import trio

        from dsh_orchestra.batch import Attempt

        executor = self

        class Runner:
            capacity = options.in_flight
            max_lost = 1

            async def attempt(self, item: Any, session_id: str, **_: Any) -> Any:
                for _step in range(executor.steps):
                    await trio.lowlevel.checkpoint()
                return Attempt(session_id=session_id, turn=executor.turn)

            def pending_approvals(self) -> int:
                return 0

        @asynccontextmanager
        async def opened() -> Any:
            yield Runner()

        return opened()


def write_dataset(path: Path, items: int) -> None:
    path.write_text("".join(json.dumps({"id": f"i{n}", "prompt": "hi"}) + "\n" for n in range(items)))


def recycle_after() -> int | None:
    """``batch``: the runtime is recycled after this many sessions (``LAYERS_RECYCLE_AFTER``;
    default: the batch default, 500; ``none``: never)."""
    from dsh_orchestra.batch._options import MAX_SESSIONS_PER_RUNTIME

    value = os.environ.get("LAYERS_RECYCLE_AFTER", "")
    return MAX_SESSIONS_PER_RUNTIME if not value else None if value == "none" else int(value)


class IoWaits(trio.abc.Instrument):
    """A trio instrument counting the run loop's waits for I/O (its wake-ups)."""

    def __init__(self) -> None:
        self.count = 0

    def after_io_wait(self, timeout: float) -> None:
        self.count += 1


WAITS = IoWaits()


def trial(mode: str, items: int, runtimes: int, in_flight: int | None = None, dataset: Path | None = None) -> float:
    import trio

    from dsh_orchestra import BatchOptions, RuntimeSpec, open_pool, open_runtime, run_batch

    in_flight = in_flight or 4 * runtimes
    with tempfile.TemporaryDirectory() as home:
        spec = RuntimeSpec.simulator(dsh_home=home, cwd=home)
        if mode in ("batch", CANNED):
            executor = CannedExecutor(canned_turn(spec), int(os.environ.get("CANNED_STEPS", "0"))) if mode == CANNED else None
            if dataset is None:
                dataset = Path(home) / "data.jsonl"
                write_dataset(dataset, items)
            cpu = time.process_time()
            summary = trio.run(partial(run_batch, executor=executor), dataset, Path(home) / "out.jsonl", spec,
                               BatchOptions(runtimes=runtimes, concurrency=in_flight, progress="none",
                                            max_sessions_per_runtime=recycle_after()), instruments=[WAITS])
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
                async with open_pool(spec, runtimes, max_sessions=-(-in_flight // runtimes)) as pool:
                    async with trio.open_nursery() as nursery:
                        for _ in range(in_flight):
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
                        for index in range(in_flight):
                            runtime = opened[index % runtimes]
                            nursery.start_soon(worker, lambda runtime=runtime: runtime.session().run("hi"))
                    outer.cancel_scope.cancel()
            assert done == items
            return time.process_time() - cpu

        return trio.run(main, instruments=[WAITS])


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


def _child(mode: str, items: int, runtimes: int, in_flight: int, dataset: Path | None) -> list[str]:
    command = [sys.executable, __file__, "--mode", mode, "--items", str(items), "--runtimes", str(runtimes),
               "--in-flight", str(in_flight)]
    return command + (["--dataset", str(dataset)] if dataset is not None else [])


def _ir(out_file: Path) -> int:
    """The total instructions of a callgrind output file."""
    for line in out_file.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no totals in {out_file}")


def _wait_cost(trials: list[dict[str, Any]]) -> float | None:
    """Instructions per I/O wait: the pooled regression of Ir on waits within each (mode, size)
    group of trials (their deviations from the group's means); None without variation."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for t in trials:
        groups.setdefault((t["mode"], t["items"]), []).append(t)
    num = den = 0.0
    for group in groups.values():
        if len(group) < 2:
            continue
        ir_mean = statistics.fmean(t["ir"] for t in group)
        wait_mean = statistics.fmean(t["io_waits"] for t in group)
        for t in group:
            num += (t["ir"] - ir_mean) * (t["io_waits"] - wait_mean)
            den += (t["io_waits"] - wait_mean) ** 2
    return num / den if den > 0 else None


def callgrind(rounds: int, small: int, large: int, runtimes: int, in_flight: int, modes: tuple[str, ...],
              calibrate: int) -> None:
    """Instructions per item (callgrind slopes, this process only) per mode, and Ir per µs of CPU.

    Every trial runs the items ``in_flight`` at a time (default 1) and counts trio's waits for
    I/O (its wake-ups: how the simulator's frames coalesced into reads). The instructions a
    wake-up costs are fitted over the rounds (Ir on waits, within each mode and size) and the
    slopes are given both as counted and corrected to the session mode's wake-ups per item,
    so that a layer's figure does not move with how frames happened to coalesce. The dataset
    is written before the traced process starts. Calibration: the same trials natively,
    ``process_time`` of the traced section, the slope between the sizes; Ir per µs = a mode's
    Ir slope / its CPU slope, the median over the modes.
    """
    load_before = os.getloadavg()[0]
    print(json.dumps({"load_1m_before": load_before}), flush=True)
    trials: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        datasets = {n: Path(scratch) / f"data{n}.jsonl" for n in (small, large)}
        for n, path in datasets.items():
            write_dataset(path, n)
        for index in range(rounds):
            order = modes[index % len(modes):] + modes[: index % len(modes)]
            for mode in order:
                for items in (small, large):
                    out = Path(scratch) / f"cg.{mode}.{items}.{index}"
                    done = subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=no",
                                           f"--callgrind-out-file={out}",
                                           *_child(mode, items, runtimes, in_flight, datasets[items])],
                                          capture_output=True, text=True, check=True)
                    waits = json.loads(done.stdout.strip().splitlines()[-1])["io_waits"]
                    trials.append({"round": index, "mode": mode, "items": items, "ir": _ir(out), "io_waits": waits})
                    print(json.dumps({**trials[-1], "load_1m": os.getloadavg()[0]}), flush=True)
        cpu: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(calibrate):
            for mode in modes:
                got = {}
                for items in (small, large):
                    done = subprocess.run(_child(mode, items, runtimes, in_flight, datasets[items]),
                                          capture_output=True, text=True, check=True)
                    got[items] = json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"]
                cpu[mode].append((got[large] - got[small]) / (large - small) * 1e6)
    per_wait = _wait_cost(trials)

    def slope(mode: str, index: int, key: str) -> float:
        by_size = {t["items"]: t[key] for t in trials if t["mode"] == mode and t["round"] == index}
        return float(by_size[large] - by_size[small]) / (large - small)

    slopes = {mode: [slope(mode, i, "ir") for i in range(rounds)] for mode in modes}
    waits = {mode: [slope(mode, i, "io_waits") for i in range(rounds)] for mode in modes}
    medians = {mode: statistics.median(values) for mode, values in slopes.items()}
    wait_medians = {mode: statistics.median(values) for mode, values in waits.items()}
    base_waits = wait_medians.get("session", 0.0)
    corrected = {mode: statistics.median(ir - (w - base_waits) * per_wait for ir, w in zip(slopes[mode], waits[mode], strict=True))
                 for mode in modes} if per_wait is not None else dict(medians)
    cpu_medians = {mode: statistics.median(values) for mode, values in cpu.items() if values}
    per_us = {mode: medians[mode] / cpu_medians[mode] for mode in cpu_medians if cpu_medians[mode] > 0}
    rate = statistics.median(per_us.values()) if per_us else None
    load_after = os.getloadavg()[0]
    print(json.dumps({"summary": True, "rounds": rounds, "items": [small, large], "runtimes": runtimes,
                      "in_flight": in_flight, "ir_per_item": slopes, "ir_per_item_median": medians,
                      "io_waits_per_item": waits, "ir_per_io_wait": per_wait, "ir_per_item_corrected": corrected,
                      "cpu_us_per_item": cpu, "ir_per_us": per_us, "ir_per_us_median": rate,
                      "load_1m_after": load_after}))
    print(f"\n**Layers, instructions per item** (callgrind, this process only; {rounds} rounds, slope between "
          f"{small} and {large} items, {runtimes} simulator process(es), {in_flight} in flight; "
          f"{per_wait or 0:,.0f} Ir per I/O wait fitted; {rate or 0:,.0f} Ir per µs; "
          f"load {load_before:.2f} before, {load_after:.2f} after)\n")
    print("| mode | Ir per item (median; rounds) | I/O waits per item | corrected to `session`'s waits "
          "| over `session` | µs over `session` |")
    print("|---|---:|---:|---:|---:|---:|")
    base = corrected.get("session")
    for mode in modes:
        rounds_text = " / ".join(f"{v / 1e3:,.0f}k" for v in slopes[mode])
        over = "—" if base is None or mode == "session" else f"{(corrected[mode] - base) / 1e3:,.1f}k"
        us = "—" if rate is None or base is None or mode == "session" else f"{(corrected[mode] - base) / rate:,.1f}"
        print(f"| `{mode}` | {medians[mode] / 1e3:,.1f}k ({rounds_text}) | {wait_medians[mode]:.2f} "
              f"| {corrected[mode] / 1e3:,.1f}k | {over} | {us} |")


def canned(rounds: int, small: int, large: int) -> float:
    """Ir per µs of the batch layer's own code: ``batch-canned`` (the run loop alone, in this
    process) under callgrind at ``small``/``large`` items, then natively ``rounds`` times at 5x
    those sizes (CPU slopes of a few hundred ms); returns the Ir slope over the median CPU slope."""
    with tempfile.TemporaryDirectory() as scratch:
        sizes = (small, large, 5 * small, 5 * large)
        paths = {n: Path(scratch) / f"data{n}.jsonl" for n in sizes}
        for n, path in paths.items():
            write_dataset(path, n)
        ir = {}
        for items in (small, large):
            out = Path(scratch) / f"cg.canned.{items}"
            subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={out}",
                            *_child(CANNED, items, 1, 1, paths[items])], capture_output=True, text=True, check=True)
            ir[items] = _ir(out)
        ir_slope = (ir[large] - ir[small]) / (large - small)
        cpu = []
        for _ in range(rounds):
            got = {}
            for items in (5 * small, 5 * large):
                done = subprocess.run(_child(CANNED, items, 1, 1, paths[items]), capture_output=True, text=True, check=True)
                got[items] = json.loads(done.stdout.strip().splitlines()[-1])["cpu_s"]
            cpu.append((got[5 * large] - got[5 * small]) / (5 * large - 5 * small) * 1e6)
    rate = ir_slope / statistics.median(cpu)
    print(json.dumps({"canned": True, "ir": ir, "ir_per_item": ir_slope, "cpu_us_per_item": cpu,
                      "ir_per_us": rate, "load_1m": os.getloadavg()[0]}), flush=True)
    print(f"\n`batch-canned` (the run loop alone): {ir_slope / 1e3:,.1f}k Ir per item, "
          f"{statistics.median(cpu):,.1f} µs per item natively (median of {rounds}: "
          f"{' / '.join(f'{v:,.1f}' for v in cpu)}), {rate:,.0f} Ir per µs\n")
    return float(rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=(*MODES, CANNED))
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--runtimes", type=int)
    parser.add_argument("--runs", type=int, help="every mode at --small and --large items, N rounds")
    parser.add_argument("--small", type=int, help="default 300 (--runs), 200 (--callgrind)")
    parser.add_argument("--large", type=int, help="default 1500 (--runs), 1000 (--callgrind)")
    parser.add_argument("--in-flight", type=int, help="items in flight (default 4 per runtime; --callgrind: 1)")
    parser.add_argument("--dataset", type=Path, help="batch mode: this dataset (of --items lines) instead of a new one")
    parser.add_argument("--callgrind", type=int, metavar="ROUNDS",
                        help="every mode at --small and --large items under callgrind, ROUNDS rounds; "
                             "--runtimes 1, --in-flight 1 by default")
    parser.add_argument("--modes", default=",".join(MODES), help="--callgrind: the modes, comma-separated")
    parser.add_argument("--calibrate", type=int, default=3, help="--callgrind: native rounds for Ir per µs")
    parser.add_argument("--canned", type=int, metavar="ROUNDS",
                        help="batch-canned under callgrind at 1,000 and 3,000 items, natively ROUNDS times at "
                             "5,000 and 15,000: the batch layer's own instructions and Ir per µs")
    args = parser.parse_args()
    args.runtimes_given = args.runtimes is not None
    args.runtimes = args.runtimes or 2
    if args.canned:
        canned(args.canned, 1000, 3000)
    if args.callgrind:
        callgrind(args.callgrind, args.small or 200, args.large or 1000, args.runtimes if args.runtimes_given else 1,
                  args.in_flight or 1, tuple(args.modes.split(",")), args.calibrate)
    elif args.runs:
        many(args.runs, args.small or 300, args.large or 1500, args.runtimes)
    elif args.mode:
        cpu = trial(args.mode, args.items, args.runtimes, args.in_flight, args.dataset)
        print(json.dumps({"mode": args.mode, "items": args.items, "cpu_s": cpu, "io_waits": WAITS.count}))
    elif not args.canned:
        parser.error("give --mode, --runs, --callgrind or --canned")


if __name__ == "__main__":
    sys.path.insert(0, str(BENCH_DIR.parent))
    main()
