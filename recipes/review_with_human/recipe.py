"""Review with a human: a model summarises a change, a person approves the summary (an interrupt),
and only an approved summary is published; a rejected one is revised instead.

    dsh-orchestra run recipes/review_with_human --checkpoint review.ckpt
        # exit 3: "approval:0: Publish this summary? ..." waits for an answer
    dsh-orchestra run recipes/review_with_human --checkpoint review.ckpt --resume --answer approval:0=approve
        # the summary is not written again; the approved one is published

On a terminal (stdin a TTY) the question is asked there instead. Shows a checkpointed run, an
interrupt with choices, resuming with the answer, and a route on the answer.
"""

from __future__ import annotations

from dsh_orchestra.workflow import StepContext, Workflow

SCRIPT = "scenario.toml"
INPUTS = {
    "change": "The retry loop of the batch runner now caps its backoff at 30 s and adds jitter.",
}

workflow = Workflow("review_with_human")

workflow.prompt("summary", "SUMMARISE this change for the release notes, in one sentence: {change}")


@workflow.step(depends_on="summary")
async def approval(ctx: StepContext) -> str:
    """A person approves or rejects the summary (the branch waits; the answer is journaled)."""
    return await ctx.interrupt(f"Publish this summary? {ctx.inputs['summary']}", choices=["approve", "reject"])


workflow.prompt("publish", "PUBLISH to the release notes: {summary}", depends_on="summary")
workflow.prompt("revise", "REVISE the summary, a person rejected it: {summary}", depends_on="summary")
workflow.route("approval", lambda answer: "publish" if answer == "approve" else "revise", ["publish", "revise"])
