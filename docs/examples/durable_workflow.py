"""A checkpointed workflow with an interrupt, resumed with the answer (docs/workflows.md).

    python docs/examples/durable_workflow.py

Runs on the simulator (a process, in a temporary DSH_HOME) with a small scenario; prints what
each run did.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import trio

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, open_workflow, run_workflow

SCENARIO = """
[[rules]]
name = "draft"
match = "DRAFT"
reply = "Nurseries bound the lifetime of tasks."

[[rules]]
name = "publish"
match = "PUBLISH"
reply = "published"
"""

wf = Workflow("post")
wf.prompt("draft", "DRAFT one sentence about {topic}")


@wf.step(depends_on="draft")
async def approve(ctx: StepContext) -> str:
    return await ctx.interrupt(f"Publish {ctx.inputs['draft']!r}?", choices=["yes", "no"])


wf.prompt("publish", "PUBLISH {draft}", depends_on=["draft", "approve"])


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        script = trio.Path(tmp, "scenario.toml")
        await script.write_text(SCENARIO)
        spec = RuntimeSpec.simulator(script=script, dsh_home=tmp, cwd=tmp)
        checkpoint = Path(tmp, "post.ckpt")
        inputs = {"topic": "trio"}

        first = await run_workflow(wf, WorkflowOptions(spec=spec, inputs=inputs, checkpoint=checkpoint))
        print(first.status, [(i.id, i.choices) for i in first.pending])

        resumed = WorkflowOptions(spec=spec, inputs=inputs, checkpoint=checkpoint, resume=True,
                                  answers={"approve:0": "yes"})
        async with open_workflow(wf, resumed) as run:
            async for event in run.events():
                print(event.kind, event.step)
            result = await run.result()
        print(result.status, result.output("publish"))


if __name__ == "__main__":
    trio.run(main)
