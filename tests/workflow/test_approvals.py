"""The approval policy and the answerer reach every session of a workflow, on a runtime or a pool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from trio.testing import MockClock

from dsh_orchestra.approvals import allow_tools, first_match
from dsh_orchestra.pool import open_pool
from dsh_orchestra.questions import by_rule
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, WorkflowResult, run_workflow

SpecFactory = Callable[..., RuntimeSpec]

SCRIPT = """
[[rules]]
name = "deploy"
match = "DEPLOY"
approval = { tool = "bash", reason = "restart the service" }
reply = "the bash call was {outcome}"
delay = 0.5

[[rules]]
name = "wipe"
match = "WIPE"
approval = { tool = "rm", reason = "delete the cache" }
reply = "the rm call was {outcome}"

[[rules]]
name = "ask"
match = "ASK"
question = { id = "env", question = "Which environment?", options = ["staging", "production"] }
reply = "deploying to {answer}"
"""

POLICY = first_match(allow_tools("bash"))  # everything else: rejected (fail closed)
ANSWERER = by_rule({"env": "production"})


def operations(targets: int) -> Workflow:
    wf = Workflow("ops")

    @wf.step()
    async def hosts(ctx: StepContext) -> list[int]:
        return list(range(targets))

    wf.prompt("deploy", "DEPLOY host {item}", fan_out="hosts")
    wf.prompt("wipe", "WIPE the cache")
    wf.prompt("ask", "ASK where to go", depends_on="deploy")
    return wf


def check(result: WorkflowResult, targets: int) -> None:
    assert result.ok, result.summary()
    assert result.output("deploy") == ["the bash call was allowed-once"] * targets
    assert result.output("wipe") == "the rm call was rejected"
    assert result.output("ask") == "deploying to production"
    deploy = result.steps["deploy"]
    assert [(a.tool_name, a.outcome) for a in deploy.approvals] == [("bash", "allowed-once")] * targets
    assert {a.session_id for a in deploy.approvals} == {i.session_id for i in deploy.items}  # one per session
    assert [(a.tool_name, a.outcome, a.rule) for a in result.steps["wipe"].approvals] == [("rm", "rejected", "default")]


async def test_policy_and_answerer_through_run_workflow(sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock) -> None:
    audit = tmp_path / "audit.jsonl"
    result = await run_workflow(operations(3), WorkflowOptions(spec=sim_spec(SCRIPT), approvals=POLICY, answerer=ANSWERER, audit=str(audit)))
    check(result, 3)
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert sorted((line["tool"], line["outcome"]) for line in lines) == [("bash", "allowed-once")] * 3 + [("rm", "rejected")]


async def test_policy_and_answerer_through_a_pool(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    async with open_pool(lambda i: sim_spec(SCRIPT, name=f"sim#{i}"), size=2, approvals=POLICY, answerer=ANSWERER) as pool:
        result = await run_workflow(operations(6), pool)
        runtimes = {runtime.name for runtime in pool.runtimes}
    check(result, 6)
    assert runtimes == {"sim#0", "sim#1"}


async def test_run_workflow_opens_a_pool_with_the_policy(sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock) -> None:
    audit = tmp_path / "audit.jsonl"
    result = await run_workflow(operations(4), WorkflowOptions(spec=sim_spec(SCRIPT), runtimes=2, approvals=POLICY, answerer=ANSWERER, audit=audit))
    check(result, 4)
    assert len(audit.read_text().splitlines()) == 5


async def test_without_a_policy_approvals_fail_closed(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("ops")
    wf.prompt("deploy", "DEPLOY now")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert result.ok and result.steps["deploy"].approvals == ()
    assert "allowed" not in result.output("deploy")
