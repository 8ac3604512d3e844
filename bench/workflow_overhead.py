"""Workflow framework overhead per step, on the in-process simulator.

    python bench/workflow_overhead.py --steps 1000 --concurrency 16 --trials 5

Each trial drives ``--steps`` trivial prompts (the simulator answers at once, no delay) through
one in-process simulated runtime (memory streams, same trio loop, so the simulator's own work
is in the figures too) in one of these modes:

* ``bare``: the floor. ``--steps`` tasks, ``--concurrency`` at a time (a CapacityLimiter), each
  ``await runtime.session().run(text)``: the session layer and the simulator, no workflow.
* ``workflow``: ``run_workflow`` of a function step returning ``--steps`` items and a prompt step
  fanned out over them with ``concurrency=--concurrency``: the same prompts plus scheduling,
  limits, per-item results, the ordered join and the WorkflowResult.
* ``typed``: as ``workflow``, but the reply is a fenced JSON object parsed into an attrs class
  (``output=``): adds extraction and cattrs structuring per step.

Per mode: wall time (``time.perf_counter``) and CPU time (``time.process_time``) of the whole
run. Every measurement gets a fresh runtime, opened before the clocks start and closed after
they stop. A warm-up run of 50 prompts per mode precedes the trials; modes are interleaved.
The per-step overhead is ``(mode - bare) / steps`` on the medians, in microseconds.

The split (``--split-trials``, separate instrumented runs): a trio Instrument times every task
step with ``time.thread_time`` and charges it to the simulator when the task descends from
``SimulatedRuntime.run``, else to the client (session layer, transport, workflow); what the
process used outside task steps is the run loop and I/O. The client's share in ``workflow`` minus
its share in ``bare`` is the workflow layer's own cost, free of the simulator's work.

One JSON line per trial on stdout, then a summary.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

from dsh_orchestra.runtime import RuntimeSpec  # noqa: E402
from dsh_orchestra.session import Runtime, open_runtime  # noqa: E402
from dsh_orchestra.testing._script import parse_script  # noqa: E402
from dsh_orchestra.testing._simulator import open_simulator_stream  # noqa: E402
from dsh_orchestra.workflow import StepContext, Workflow, run_workflow  # noqa: E402

MODES = ("bare", "workflow", "typed")
SCRIPT = parse_script(
    tomllib.loads(
        '''
default_reply = "ok"

[[rules]]
name = "typed"
match = "TYPED"
reply = """```json
{"index": 1, "verdict": "ok"}
```"""
'''
    ),
    source="workflow_overhead",
)


@attrs.frozen
class Answer:
    index: int
    verdict: str


def fan_out(steps: int, concurrency: int, *, typed: bool) -> Workflow:
    wf = Workflow("overhead")

    @wf.step()
    async def items(ctx: StepContext) -> list[int]:
        return list(range(steps))

    if typed:
        wf.prompt("work", "TYPED {item}", fan_out="items", output=Answer, concurrency=concurrency)
    else:
        wf.prompt("work", "trivial {item}", fan_out="items", concurrency=concurrency)
    return wf


async def bare(runtime: Runtime, steps: int, concurrency: int) -> int:
    limiter = trio.CapacityLimiter(concurrency)
    done = 0

    async def one(index: int) -> None:
        nonlocal done
        async with limiter:
            turn = await runtime.session().run(f"trivial {index}")
            assert turn.final_response == "ok"
            done += 1

    async with trio.open_nursery() as nursery:
        for index in range(steps):
            nursery.start_soon(one, index)
    return done


async def workflow(runtime: Runtime, steps: int, concurrency: int, *, typed: bool) -> int:
    result = await run_workflow(fan_out(steps, concurrency, typed=typed), runtime)
    assert result.ok, result.summary()
    return len(result.steps["work"].items)


class Split(trio.abc.Instrument):
    """Charges the CPU time of every task step to the simulator or to the client."""

    def __init__(self) -> None:
        self.simulator = 0.0
        self.client = 0.0
        self._side: dict[trio.lowlevel.Task, bool] = {}
        self._started: float | None = None  # None: the step in progress began before we were added

    def _is_simulator(self, task: trio.lowlevel.Task) -> bool:
        side = self._side.get(task)
        if side is None:
            side, walk = False, task
            while walk is not None:
                if getattr(walk.coro, "__qualname__", "") == "SimulatedRuntime.run":
                    side = True
                    break
                nursery = walk.parent_nursery
                walk = nursery.parent_task if nursery is not None else None
            self._side[task] = side
        return side

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self._started is None:
            return
        spent, self._started = time.thread_time() - self._started, None
        if self._is_simulator(task):
            self.simulator += spent
        else:
            self.client += spent

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self._side.pop(task, None)


def new_spec() -> RuntimeSpec:
    return RuntimeSpec(connect=lambda: open_simulator_stream(SCRIPT), cwd=Path.cwd(), name="sim")


async def measure(mode: str, steps: int, concurrency: int, *, split: bool = False) -> dict[str, Any]:
    async with open_runtime(new_spec()) as runtime:
        gc.collect()
        instrument = Split() if split else None
        if instrument is not None:
            trio.lowlevel.add_instrument(instrument)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        if mode == "bare":
            done = await bare(runtime, steps, concurrency)
        else:
            done = await workflow(runtime, steps, concurrency, typed=mode == "typed")
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        if instrument is not None:
            trio.lowlevel.remove_instrument(instrument)
    assert done == steps
    record: dict[str, Any] = {"mode": mode, "steps": steps, "concurrency": concurrency, "wall_s": wall, "cpu_s": cpu}
    if instrument is not None:
        record.update(
            simulator_cpu_s=instrument.simulator, client_cpu_s=instrument.client,
            loop_cpu_s=cpu - instrument.simulator - instrument.client,
        )
    return record


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = []
    for mode in args.modes:  # warm-up
        await measure(mode, 50, args.concurrency)
    for kind, count in (("timed", args.trials), ("split", args.split_trials)):
        for trial in range(count):
            for mode in args.modes:  # interleaved, so drift hits every mode alike
                record = await measure(mode, args.steps, args.concurrency, split=kind == "split")
                record["trial"], record["kind"] = trial, kind
                print(json.dumps(record), flush=True)
                trials.append(record)
    return trials


def summarise(trials: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    medians: dict[str, dict[str, float]] = {}
    for mode in MODES:
        timed = [t for t in trials if t["mode"] == mode and t["kind"] == "timed"]
        split = [t for t in trials if t["mode"] == mode and t["kind"] == "split"]
        row: dict[str, float] = {}
        if timed:
            row["wall_s"] = statistics.median(r["wall_s"] for r in timed)
            row["cpu_s"] = statistics.median(r["cpu_s"] for r in timed)
            row["wall_us_per_step"] = row["wall_s"] / steps * 1e6
            row["cpu_us_per_step"] = row["cpu_s"] / steps * 1e6
        for key in ("simulator_cpu_s", "client_cpu_s", "loop_cpu_s"):
            if split:
                row[key] = statistics.median(r[key] for r in split)
        if row:
            medians[mode] = row
    floor = medians.get("bare")
    if floor is not None:
        for mode, row in medians.items():
            if mode == "bare":
                continue
            for key in ("wall_s", "cpu_s", "client_cpu_s"):
                if key in row and key in floor:
                    row[f"overhead_{key[:-2]}_us_per_step"] = (row[key] - floor[key]) / steps * 1e6
    return medians


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--split-trials", type=int, default=3, help="instrumented trials for the simulator/client split")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    options = parser.parse_args()
    results = trio.run(main, options)
    print(json.dumps({"summary": summarise(results, options.steps), "machine": machine()}, indent=2))
