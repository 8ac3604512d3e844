"""The live step status of ``dsh-orchestra run``, fed by a real run's events (virtual time)."""

from __future__ import annotations

import io
from typing import Callable

import trio
from trio.testing import MockClock

from dsh_orchestra.cli._run_status import StepBoard
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, open_workflow

SpecFactory = Callable[..., RuntimeSpec]

SCRIPT = """
[[rules]]
name = "slow"
match = "SLOW"
reply = "done"
delay = 25.0
"""


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def workflow() -> Workflow:
    wf = Workflow("status")
    wf.prompt("slow", "SLOW work")

    @wf.step()
    async def ask(ctx: StepContext) -> str:
        return await ctx.interrupt("ok?")

    return wf


async def test_lines_every_interval_while_it_runs(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    out = io.StringIO()
    async with open_workflow(workflow(), WorkflowOptions(spec=sim_spec(SCRIPT))) as run:
        board = StepBoard(workflow(), run.events(), stream=out, interval=10.0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(board.run)
            await run.result()
            await board.finished.wait()
    lines = out.getvalue().splitlines()
    assert lines[0] == "workflow 'status': 0/2 steps settled, running: slow, 1 interrupt(s) waiting"
    assert len(lines) == 2  # at 10 s and 20 s; the run ends at 25 s


async def test_a_bar_on_a_terminal(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    out = Terminal()
    async with open_workflow(workflow(), WorkflowOptions(spec=sim_spec(SCRIPT))) as run:
        board = StepBoard(workflow(), run.events(), stream=out)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(board.run)
            await run.result()
            await board.finished.wait()
    text = out.getvalue()
    assert "workflow:" in text and "running=slow" in text and "waiting=1" in text
    assert "1/2" in text  # slow finished; ask waits for its answer
