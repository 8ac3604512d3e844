"""WorkflowOptions: one options record for run_workflow and open_workflow; the keyword path of
before it still runs, with a DeprecationWarning; where the options and the target may go."""

from __future__ import annotations

from typing import Callable

import attrs
import pytest
from trio.testing import MockClock

from dsh_orchestra import WorkflowOptions as RootWorkflowOptions
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.workflow import Statistics, StepContext, Workflow, WorkflowOptions, open_workflow, run_workflow

SpecFactory = Callable[..., RuntimeSpec]

SCRIPT = """
[[rules]]
name = "echo"
match = "WORK"
reply = "done"
delay = 1.0
"""


def workload() -> Workflow:
    wf = Workflow("load")

    @wf.step()
    async def items(ctx: StepContext) -> list[int]:
        return list(range(4))

    wf.prompt("work", "WORK {item}", fan_out="items")
    return wf


def test_the_options_are_public_at_the_root_and_evolve() -> None:
    options = WorkflowOptions(concurrency=2, inputs={"a": 1})
    assert RootWorkflowOptions is WorkflowOptions
    assert attrs.evolve(options, concurrency=3) == WorkflowOptions(concurrency=3, inputs={"a": 1})
    with pytest.raises(TypeError):
        WorkflowOptions(2)  # type: ignore[misc]  # keywords only


async def test_options_second_or_after_a_target_run_alike(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    spec = sim_spec(SCRIPT)
    first, second = Statistics(), Statistics()
    alone = await run_workflow(workload(), WorkflowOptions(spec=spec, concurrency=1, statistics=first))
    async with open_runtime(spec) as runtime:
        targeted = await run_workflow(workload(), runtime, WorkflowOptions(concurrency=1, statistics=second))
    assert alone.ok and targeted.ok
    assert first.max_in_flight == second.max_in_flight == 1
    assert alone.duration_s == targeted.duration_s == pytest.approx(4.0, abs=0.2)
    async with open_workflow(workload(), options=WorkflowOptions(spec=spec, concurrency=2)) as run:
        result = await run.result()
    assert result.ok and result.duration_s == pytest.approx(2.0, abs=0.2)


async def test_the_keywords_of_before_still_run_with_a_deprecation_warning(
    sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    spec = sim_spec(SCRIPT)
    stats = Statistics()
    with pytest.warns(DeprecationWarning, match=r"run_workflow\(workflow, WorkflowOptions\(spec=\.\.\., concurrency=\.\.\."):
        result = await run_workflow(workload(), spec=spec, concurrency=2, statistics=stats)
    assert result.ok and stats.max_in_flight == 2
    with pytest.warns(DeprecationWarning, match="open_workflow"):
        async with open_workflow(workload(), WorkflowOptions(spec=spec), concurrency=1) as run:
            result = await run.result()
    assert result.ok and result.duration_s == pytest.approx(4.0, abs=0.2)  # the keyword wins over the options


async def test_wrong_calls_are_type_errors_before_anything_runs() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'concurency'"):
        await run_workflow(workload(), concurency=2)
    with pytest.raises(TypeError, match="WorkflowOptions twice"):
        await run_workflow(workload(), WorkflowOptions(), WorkflowOptions())
    with pytest.raises(ValueError, match="concurrency"):
        await run_workflow(workload(), WorkflowOptions(concurrency=0))
