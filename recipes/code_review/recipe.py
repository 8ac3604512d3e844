"""Code review: one reviewer session per file (fan-out), typed verdicts, one summarising step (join).

    dsh-orchestra run recipes/code_review                 # on the simulator, playing scenario.toml
    dsh-orchestra run recipes/code_review --json
    dsh-orchestra run recipes/code_review --input 'files=["a.py", "b.py"]' --runtime dsh --dsh-home DIR

Each reviewer answers a ``Review`` as JSON; an answer that does not parse is sent back to the
same session with the problem (in the scenario, ``src/legacy.py`` is answered in prose first).
The summary step receives the reviews in the order of ``files``, whatever order they finished in.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from dsh_orchestra.workflow import StepContext, Workflow

SCRIPT = "scenario.toml"
INPUTS = {"files": ["src/lexer.py", "src/parser.py", "src/legacy.py"]}


@attrs.frozen
class Review:
    """One reviewer's verdict on one file."""

    file: str
    verdict: Literal["approve", "request-changes"]
    issues: list[str] = attrs.field(factory=list)


@attrs.frozen
class Summary:
    """The summarising reviewer's report."""

    headline: str
    approved: list[str]
    needs_changes: list[str]


workflow = Workflow("code-review")


@workflow.step()
async def files(ctx: StepContext) -> list[str]:
    """The files to review, from the ``files`` input."""
    return [str(name) for name in ctx.workflow_inputs["files"]]


workflow.prompt(
    "review",
    "REVIEW {item}: read the file and review it for bugs and risky changes. "
    "Answer with a JSON object with the keys file, verdict (approve or request-changes) and issues "
    "(a list of strings), in a ```json fenced block.",
    fan_out="files",
    output=Review,
    concurrency=4,  # at most four reviewers at once
    timeout=600,  # per review, from the moment its prompt is sent
    retries=1,  # once more if the runtime is lost or the review times out
)


def summary_prompt(values: dict[str, Any]) -> str:
    reviews: list[Review] = values["review"]
    lines = "\n".join(f"- {r.file}: {r.verdict}; " + ("; ".join(r.issues) or "no issues") for r in reviews)
    return (
        "SUMMARISE the code review below for the change's author. Answer with a JSON object with the keys "
        "headline, approved (file names) and needs_changes (file names), in a ```json fenced block.\n" + lines
    )


workflow.prompt("summary", summary_prompt, depends_on="review", output=Summary)
