"""Judge: two writers answer the same question in their own named sessions, a judge compares the
answers (typed ``Verdict``), and a route sends the winner's session back to polish its answer.

    dsh-orchestra run recipes/judge
    dsh-orchestra run recipes/judge --input 'question=Why does trio have nurseries?'

Shows named sessions (the winner polishes in the session that wrote the answer, so it keeps the
context), a typed join of two steps, and a conditional edge: the loser's polish step is skipped
(a skipped step does not fail the workflow).
"""

from __future__ import annotations

from typing import Literal

import attrs

from dsh_orchestra.workflow import Workflow

SCRIPT = "scenario.toml"
INPUTS = {"question": "When should a trio program use a nursery instead of start_soon on a global one?"}


@attrs.frozen
class Verdict:
    """The judge's decision."""

    winner: Literal["a", "b"]
    reason: str
    score_a: int
    score_b: int


workflow = Workflow("judge")

workflow.prompt("candidate_a", "CANDIDATE A: answer concisely: {question}", session="writer-a")
workflow.prompt("candidate_b", "CANDIDATE B: answer with an example: {question}", session="writer-b")
workflow.prompt(
    "judge",
    "JUDGE these two answers to the question {question!r}.\n\nAnswer A:\n{candidate_a}\n\nAnswer B:\n{candidate_b}\n\n"
    "Reply with a JSON object with the keys winner (a or b), reason, score_a and score_b (0-10), "
    "in a ```json fenced block.",
    depends_on=["candidate_a", "candidate_b"],
    output=Verdict,
)
workflow.prompt("polish_a", "POLISH A: the judge preferred your answer ({judge.reason}); tighten it.", session="writer-a")
workflow.prompt("polish_b", "POLISH B: the judge preferred your answer ({judge.reason}); tighten it.", session="writer-b")
workflow.route("judge", lambda verdict: f"polish_{verdict.winner}", ["polish_a", "polish_b"])
