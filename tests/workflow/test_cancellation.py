"""Cancelling a whole workflow: every step stops and no runtime process is left behind.

These spawn the simulator as a process (``python -m dsh_orchestra.testing sim``) and look at
the process table; real time, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, run_workflow

from .workflow_support import children_pids

SCRIPT = """
[[rules]]
name = "stuck"
match = "HANG"
hang = true
"""


def hanging(seen: list[set[int]], running: trio.Event, before: set[int], runtimes: int) -> Workflow:
    wf = Workflow("hanging")

    @wf.step()
    async def items(ctx: StepContext) -> list[int]:
        return [0, 1, 2]

    wf.prompt("work", "HANG {item}", fan_out="items")
    wf.prompt("after", "never {work}", depends_on="work")

    @wf.step(depends_on="items")
    async def watch(ctx: StepContext) -> None:
        # Waited for, not assumed after a fixed 0.3 s (a loaded machine may take longer to spawn):
        while len(children_pids() - before) < runtimes:  # noqa: ASYNC110 - the process table has no event
            await trio.sleep(0.01)
        await trio.testing.wait_all_tasks_blocked()  # the prompts are out, waiting for answers
        seen.append(children_pids())
        running.set()
        await trio.sleep_forever()

    return wf


@pytest.mark.parametrize("runtimes", [1, 2])
async def test_cancelling_a_workflow_leaves_no_runtime_process(tmp_path: Path, runtimes: int) -> None:
    script = tmp_path / "scenario.toml"
    script.write_text(SCRIPT)
    spec = RuntimeSpec.simulator(script=script, dsh_home=tmp_path / "home", cwd=tmp_path)
    before = children_pids()
    seen: list[set[int]] = []
    running = trio.Event()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await run_workflow(hanging(seen, running, before, runtimes), WorkflowOptions(spec=spec, runtimes=runtimes))
                raise AssertionError("a workflow of hanging prompts returned")

            nursery.start_soon(run)
            await running.wait()
            nursery.cancel_scope.cancel(reason="the test cancels the workflow")
    (during,) = seen
    assert len(during - before) == runtimes  # the runtime processes were there while it ran
    assert children_pids() - before == set()  # and every one was reaped by the time run_workflow left
