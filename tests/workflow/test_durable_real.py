"""Resume on the REAL runtime (bundled ``dsh --profile sdk``) with the scripted model: a named
session persisted by the first process is resumed (``session/resume``) by the second, in the
same DSH_HOME, so the step after the interrupt continues the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import trio

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, run_workflow

from .workflow_support import scenario

pytestmark = pytest.mark.integration


@pytest.fixture
def model_script() -> Script:
    return scenario(
        """
[[rules]]
name = "outline"
match = "OUTLINE"
reply = "1. nurseries 2. cancel scopes"

[[rules]]
name = "expand"
match = "EXPAND"
reply = "Nurseries own their tasks; cancel scopes bound them."
"""
    )


def writer() -> Workflow:
    wf = Workflow("writer")
    wf.prompt("outline", "OUTLINE a post about trio", session="writer")

    @wf.step(depends_on="outline")
    async def review(ctx: StepContext) -> str:
        return await ctx.interrupt("expand this outline?", choices=["yes", "no"])

    wf.prompt("expand", "EXPAND the outline ({review})", session="writer", depends_on="review")
    return wf


async def test_resume_continues_the_persisted_named_session_in_a_new_runtime_process(
    dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "writer.ckpt"
    with trio.fail_after(240):  # a start took 37-60+ s under disk contention
        first = await run_workflow(writer(), WorkflowOptions(spec=dsh_spec(), checkpoint=checkpoint))
    assert first.status == "interrupted", first.summary()
    session = first.steps["outline"].items[0].session_id
    assert session is not None and session.startswith("wf-writer-")
    with trio.fail_after(240):  # a start took 37-60+ s under disk contention
        second = await run_workflow(writer(), WorkflowOptions(spec=dsh_spec(), checkpoint=checkpoint, resume=True, answers={"review:0": "yes"}))
    assert second.ok, second.summary()
    assert second.steps["expand"].items[0].session_id == session  # resumed, not re-created
    assert second.output("outline") == "1. nurseries 2. cancel scopes"  # reused from the checkpoint
    prompts = [(r.rule, r.session_id) for r in fake_model.requests if r.kind == "prompt"]
    assert prompts == [("outline", session), ("expand", session)]  # the outline was not asked again
