"""WorkflowResult: statuses, timing, attempts, outputs, approvals, errors; JSON round trip; Mermaid."""

from __future__ import annotations

import json
from typing import Callable

import attrs
import pytest
from trio.testing import MockClock

from dsh_orchestra.approvals import allow_tools, first_match
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, WorkflowResult, run_workflow

SpecFactory = Callable[..., RuntimeSpec]


@attrs.frozen
class Verdict:
    winner: str
    notes: list[str]


SCRIPT = r'''
[[rules]]
name = "judge"
match = "JUDGE"
reply = """```json
{"winner": "a", "notes": ["clearer"]}
```"""
delay = 1.0

[[rules]]
name = "spawn"
match = "SPAWN"
reply = "spawned"
after_subagents = "children done"

[[rules.spawn]]
description = "child"
prompt = "CHILD do it"
reply = "child says hi"
thinking = "hmm"

[[rules]]
name = "deploy"
match = "DEPLOY"
approval = { tool = "bash", reason = "restart" }
reply = "bash was {outcome}"

[[rules]]
name = "boom"
match = "BOOM"
fail = "http-400"
'''


def everything() -> Workflow:
    """One workflow whose result has every status and every kind of detail."""
    wf = Workflow("everything")

    @wf.step()
    async def items(ctx: StepContext) -> list[str]:
        return ["DEPLOY x", "SPAWN y"]

    wf.prompt("work", "{item}", fan_out="items")
    wf.prompt("judge", "JUDGE them", output=Verdict, depends_on="work")
    wf.prompt("boom", "BOOM", depends_on="items")
    wf.prompt("after_boom", "after", depends_on="boom")

    @wf.step(depends_on="judge")
    async def a(ctx: StepContext) -> str:
        return "a wins"

    @wf.step(depends_on="judge")
    async def b(ctx: StepContext) -> str:
        return "b wins"

    wf.route("judge", lambda verdict: verdict.winner, ["a", "b"])
    return wf


@pytest.fixture
async def result(sim_spec: SpecFactory, autojump_clock: MockClock) -> WorkflowResult:
    return await run_workflow(everything(), WorkflowOptions(spec=sim_spec(SCRIPT), failure="collect", approvals=first_match(allow_tools("bash"))))


async def test_statuses_timing_attempts_outputs_approvals_errors(result: WorkflowResult, autojump_clock: MockClock) -> None:
    statuses = {name: step.status for name, step in result.steps.items()}
    assert statuses == {
        "items": "ok", "work": "ok", "judge": "ok", "boom": "failed", "after_boom": "skipped", "a": "ok", "b": "skipped",
    }
    assert result.status == "failed" and not result.ok
    assert list(result.steps) == ["items", "work", "judge", "boom", "after_boom", "a", "b"]  # definition order
    judge = result.steps["judge"]
    assert judge.output == Verdict(winner="a", notes=["clearer"]) and judge.attempts == 1
    assert judge.duration_s == pytest.approx(1.0, abs=0.05)
    assert judge.started_s is not None and judge.started_s >= result.steps["work"].duration_s
    assert [(a.tool_name, a.outcome) for a in result.steps["work"].approvals] == [("bash", "allowed-once")]
    assert [s.text for s in result.steps["work"].subagents] == ["child says hi"]
    assert result.steps["boom"].errors[0].type == "TurnFailedError"
    assert result.steps["after_boom"].reason == "dependency 'boom' failed" and result.steps["after_boom"].started_s is None
    assert result.steps["b"].reason == "not chosen by the route from 'judge'"
    with pytest.raises(ValueError, match="step 'b' is skipped"):
        result.output("b")


async def test_json_round_trip(result: WorkflowResult, autojump_clock: MockClock) -> None:
    data = result.to_json()
    text = json.dumps(data)  # plain JSON: typed outputs became objects
    assert json.loads(text)["steps"]["judge"]["output"] == {"winner": "a", "notes": ["clearer"]}
    assert json.loads(text)["edges"][0] == {"from": "items", "to": "work", "kind": "fan-out"}
    again = WorkflowResult.from_json(json.loads(text))
    assert again.to_json() == data
    assert again.steps["boom"].errors == result.steps["boom"].errors
    assert again.steps["work"].subagents == result.steps["work"].subagents  # content blocks included
    assert again.steps["judge"].output == {"winner": "a", "notes": ["clearer"]}  # typed outputs read back as JSON
    assert again.edges == result.edges and again.status == "failed"


def test_from_json_rejects_other_documents() -> None:
    with pytest.raises(ValueError, match="not a workflow result"):
        WorkflowResult.from_json({"name": "x", "status": "maybe", "steps": {}})
    with pytest.raises(ValueError, match="edges must be objects"):
        WorkflowResult.from_json({"name": "x", "status": "ok", "steps": {}, "edges": [1]})


async def test_mermaid_shows_the_graph_and_the_statuses(result: WorkflowResult, autojump_clock: MockClock) -> None:
    chart = result.mermaid()
    assert chart.startswith("flowchart TD\n")
    assert '    n_work["work<br/>ok, ' in chart and "2/2 items" in chart
    assert "    n_items ==>|fan-out| n_work\n" in chart
    assert "    n_work --> n_judge\n" in chart
    assert "    n_judge -.->|route| n_a\n" in chart and "    n_judge -.->|route| n_b\n" in chart
    assert "    class n_boom failed\n" in chart
    assert "    class n_after_boom,n_b skipped\n" in chart
    assert "    classDef skipped " in chart


async def test_summary_is_readable(result: WorkflowResult, autojump_clock: MockClock) -> None:
    text = result.summary()
    lines = text.splitlines()
    assert lines[0].startswith("workflow 'everything': failed in ") and lines[0].endswith("(collect, first failure: 'boom')")
    assert any(line.split()[:2] == ["work", "ok"] and "2/2 items" in line and "approvals: bash allowed-once" in line for line in lines)
    assert "!! TurnFailedError: " in text
    assert ".. dependency 'boom' failed" in text
    assert "-> {'winner': 'a', 'notes': ['clearer']}" in text
