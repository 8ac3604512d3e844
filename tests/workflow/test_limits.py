"""Concurrency limits really bound: per workflow, per step, per runtime.

Each limit is checked twice: by the engine's own Statistics and, independently, by a fake in
the middle of the wire (WireMeter) counting sessions between their ``session/prompt`` and the
``session/wait`` response, with the simulator's scripted delay keeping prompts in flight.
"""

from __future__ import annotations

import math
from typing import Callable

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.pool import open_pool
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import Statistics, StepContext, Workflow, WorkflowOptions, run_workflow

from .workflow_support import WireMeter

SpecFactory = Callable[..., RuntimeSpec]

SLOW = """
[[rules]]
name = "slow"
match = "WORK"
reply = "done"
delay = 1.0
"""


def workload(n: int, *, branches: int = 1, step_concurrency: int | None = None) -> Workflow:
    wf = Workflow("load")

    @wf.step()
    async def items(ctx: StepContext) -> list[int]:
        return list(range(n))

    for branch in range(branches):
        wf.prompt(f"work{branch}", "WORK {item}", fan_out="items", concurrency=step_concurrency)
    return wf


@pytest.mark.parametrize("limit", [1, 3, 7])
async def test_workflow_concurrency_bounds_prompts_in_flight(
    sim_spec: SpecFactory, autojump_clock: MockClock, limit: int
) -> None:
    meter, stats = WireMeter(), Statistics()
    result = await run_workflow(workload(12, branches=2), WorkflowOptions(spec=sim_spec(SLOW, meter=meter), concurrency=limit, statistics=stats))
    assert result.ok
    assert stats.max_in_flight == limit and meter.max_in_flight == limit
    assert stats.prompts == meter.prompts == 24
    assert result.duration_s == pytest.approx(math.ceil(24 / limit) * 1.0, abs=0.2)  # and it was used fully


async def test_step_concurrency_bounds_each_step(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meter, stats = WireMeter(), Statistics()
    result = await run_workflow(workload(10, branches=2, step_concurrency=2), WorkflowOptions(spec=sim_spec(SLOW, meter=meter), statistics=stats))
    assert result.ok
    assert stats.max_in_flight == meter.max_in_flight == 4  # two steps, two each
    for branch in ("work0", "work1"):
        assert result.steps[branch].duration_s == pytest.approx(5.0, abs=0.2)


async def test_step_limit_inside_a_workflow_limit(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meter = WireMeter()
    result = await run_workflow(workload(10, branches=2, step_concurrency=4), WorkflowOptions(spec=sim_spec(SLOW, meter=meter), concurrency=5))
    assert result.ok and meter.max_in_flight == 5


async def test_without_limits_everything_runs_at_once(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meter = WireMeter()
    result = await run_workflow(workload(20), WorkflowOptions(spec=sim_spec(SLOW, meter=meter)))
    assert result.ok and meter.max_in_flight == 20 and result.duration_s == pytest.approx(1.0, abs=0.1)


async def test_runtime_limit_bounds_each_runtime_of_a_pool(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meters = [WireMeter(), WireMeter()]
    stats = Statistics()
    async with open_pool(lambda i: sim_spec(SLOW, meter=meters[i], name=f"sim#{i}"), size=2) as pool:
        result = await run_workflow(workload(12), pool, WorkflowOptions(runtime_limit=2, statistics=stats))
    assert result.ok
    assert [m.max_in_flight for m in meters] == [2, 2]
    assert stats.max_in_flight == 4
    assert sum(m.prompts for m in meters) == 12


async def test_runtime_limit_on_one_runtime(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meter = WireMeter()
    result = await run_workflow(workload(9), WorkflowOptions(spec=sim_spec(SLOW, meter=meter), runtime_limit=3))
    assert result.ok and meter.max_in_flight == 3 and result.duration_s == pytest.approx(3.0, abs=0.2)


async def test_pool_max_sessions_bounds_with_the_workflow(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meters = [WireMeter(), WireMeter(), WireMeter()]
    async with open_pool(lambda i: sim_spec(SLOW, meter=meters[i]), size=3, max_sessions=1) as pool:
        result = await run_workflow(workload(9), pool, WorkflowOptions(concurrency=10))
    assert result.ok and [m.max_in_flight for m in meters] == [1, 1, 1]


async def test_function_steps_prompting_in_parallel_share_the_limit(
    sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    wf = Workflow("parallel")

    @wf.step()
    async def burst(ctx: StepContext) -> int:
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(ctx.prompt, f"WORK {i}")
        return len(ctx.turns)

    meter = WireMeter()
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SLOW, meter=meter), concurrency=3))
    assert result.output("burst") == 8 and meter.max_in_flight == 3
