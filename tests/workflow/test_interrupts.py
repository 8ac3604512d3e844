"""Interrupts, escalated approvals, subworkflows and live events, in process (simulator, virtual time)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.approvals import allow_tools
from dsh_orchestra.protocol import SubscriberOverflowError
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import (
    Interrupt,
    InterruptPending,
    StepContext,
    Workflow,
    WorkflowEvent,
    escalate,
    open_workflow,
    run_workflow,
)

from .workflow_support import WireMeter
from dsh_orchestra.workflow import WorkflowOptions

SpecFactory = Callable[..., RuntimeSpec]

SCRIPT = """
[[rules]]
name = "draft"
match = "DRAFT"
reply = "a draft"
delay = 1.0

[[rules]]
name = "publish"
match = "PUBLISH"
reply = "published"

[[rules]]
name = "deploy"
match = "DEPLOY"
approval = { tool = "bash", reason = "restart the service" }
reply = "the bash call was {outcome}"
"""


def branches() -> Workflow:
    """Two parallel branches that each ask a person, then a join."""
    wf = Workflow("branches")

    @wf.step()
    async def hosts(ctx: StepContext) -> list[str]:
        return ["alpha", "beta"]

    @wf.step(fan_out="hosts")
    async def approve(ctx: StepContext) -> str:
        await ctx.prompt(f"DRAFT for {ctx.item}")
        return await ctx.interrupt(f"deploy {ctx.item}?", choices=["yes", "no"])

    wf.prompt("publish", "PUBLISH {approve}", depends_on="approve")
    return wf


async def test_parallel_branches_get_distinct_ids_and_the_rest_keeps_running(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    wf = branches()
    wf.prompt("unrelated", "PUBLISH the rest")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=tmp_path / "c"))
    assert result.status == "interrupted"
    assert [(i.id, i.question, i.choices) for i in result.pending] == [
        ("approve[0]:0", "deploy alpha?", ("yes", "no")),
        ("approve[1]:0", "deploy beta?", ("yes", "no")),
    ]
    assert result.to_json()["pending"] == [
        {"id": "approve[0]:0", "question": "deploy alpha?", "choices": ["yes", "no"]},
        {"id": "approve[1]:0", "question": "deploy beta?", "choices": ["yes", "no"]},
    ]
    assert result.steps["unrelated"].status == "ok"  # the rest of the workflow ran
    assert result.steps["approve"].status == "interrupted"
    assert result.steps["publish"].status == "skipped"


@pytest.mark.parametrize("order", [("approve[0]:0", "approve[1]:0"), ("approve[1]:0", "approve[0]:0")])
async def test_parallel_interrupts_answered_in_either_order(
    order: tuple[str, str], sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    path = tmp_path / "c"
    answer = {"approve[0]:0": "yes", "approve[1]:0": "no"}
    await run_workflow(branches(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    meter = WireMeter()
    first = await run_workflow(branches(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), checkpoint=path, resume=True, answers={order[0]: answer[order[0]]}))
    assert [i.id for i in first.pending] == [order[1]]
    second = await run_workflow(branches(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), checkpoint=path, resume=True, answers={order[1]: answer[order[1]]}))
    assert second.ok, second.summary()
    assert second.output("approve") == ["yes", "no"]
    assert second.pending == ()


async def test_a_live_answerer_answers_while_the_run_goes_on(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    asked: list[Interrupt] = []

    async def person(interrupt: Interrupt) -> str:
        asked.append(interrupt)
        await trio.sleep(30 if interrupt.id.startswith("approve[0]") else 5)  # beta is answered first
        return "yes"

    result = await run_workflow(branches(), WorkflowOptions(spec=sim_spec(SCRIPT), answers=person))
    assert result.ok, result.summary()
    assert sorted(i.id for i in asked) == ["approve[0]:0", "approve[1]:0"]


async def test_an_unanswered_interrupt_times_out_into_the_step(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("timeout")
    seen: list[str] = []

    @wf.step()
    async def ask(ctx: StepContext) -> str:
        try:
            return await ctx.interrupt("still there?", timeout=60)
        except TimeoutError as exc:
            seen.append(str(exc))
            return "nobody answered"

    async def silent(interrupt: Interrupt) -> str:
        await trio.sleep_forever()
        raise AssertionError

    start = trio.current_time()
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), answers=silent))
    assert result.output("ask") == "nobody answered"
    assert seen == ["interrupt 'ask:0' was not answered within 60 s"]
    assert trio.current_time() - start == pytest.approx(60, abs=1)
    assert result.pending == ()


async def test_a_bad_answer_and_bad_arguments_fail_the_step(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("bad")

    @wf.step()
    async def ask(ctx: StepContext) -> str:
        return await ctx.interrupt("which?", choices=["a", "b"])

    @wf.step()
    async def empty(ctx: StepContext) -> str:
        return await ctx.interrupt("which?", choices=[])

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), answers={"ask:0": "c"}, failure="collect"))
    assert result.steps["ask"].errors[0].message == "the answer 'c' to interrupt 'ask:0' is not one of its choices: a, b"
    assert "choices must be a non-empty list" in result.steps["empty"].errors[0].message


async def test_catching_the_pending_interrupt_still_ends_the_branch_interrupted(
    sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    wf = Workflow("swallow")

    @wf.step()
    async def ask(ctx: StepContext) -> str:
        try:
            return await ctx.interrupt("go?")
        except InterruptPending:
            return "carry on"

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert result.status == "interrupted"
    assert [i.id for i in result.pending] == ["ask:0"]


def review_sub() -> Workflow:
    """A parent whose subworkflow drafts, asks, then publishes: per item of a fan-out."""
    child = Workflow("child")
    child.prompt("draft", "DRAFT about {item}")

    @child.step(depends_on="draft")
    async def check(ctx: StepContext) -> str:
        return await ctx.interrupt(f"publish the draft about {ctx.workflow_inputs['item']}?", choices=["yes", "no"])

    child.prompt("publish", "PUBLISH {draft} ({check})", depends_on=["draft", "check"])
    parent = Workflow("parent")

    @parent.step()
    async def topics(ctx: StepContext) -> list[str]:
        return ["trio", "ray"]

    parent.subworkflow("post", child, fan_out="topics")

    @parent.step(depends_on="post")
    async def count(ctx: StepContext) -> int:
        return sum(1 for run in ctx.inputs["post"] if run["check"] == "yes")

    return parent


async def test_a_subworkflow_interrupt_resumes_in_place(sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock) -> None:
    path = tmp_path / "c"
    meter = WireMeter()
    first = await run_workflow(review_sub(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), checkpoint=path))
    assert first.status == "interrupted"
    assert [i.id for i in first.pending] == ["post[0]/check:0", "post[1]/check:0"]
    assert first.steps["post[0]/draft"].status == "ok"
    assert meter.prompts == 2
    again = WireMeter()
    second = await run_workflow(review_sub(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=again), checkpoint=path, resume=True, answers={"post[0]/check:0": "yes", "post[1]/check:0": "no"}))
    assert second.ok, second.summary()
    assert again.prompts == 2  # the two publishes: the drafts were not run again
    assert second.output("count") == 1
    assert second.output("post")[0] == {"draft": "a draft", "check": "yes", "publish": "published"}
    assert "n_post__0__draft" not in second.mermaid()


async def test_escalate_turns_an_undecided_approval_into_an_interrupt(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    wf = Workflow("ops")
    wf.prompt("deploy", "DEPLOY now")
    policy = escalate(allow_tools("git"), timeout=120)  # a rule: None (undecided) for bash
    path = tmp_path / "c"
    first = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), approvals=policy, checkpoint=path))
    assert first.status == "interrupted", (first.summary(), first.steps["deploy"].approvals)
    assert [(i.id, i.question, i.choices) for i in first.pending] == [
        ("deploy:0", "allow tool bash (escalate sandbox to danger-full-access: restart the service)?", ("allow", "reject")),
    ]
    second = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), approvals=policy, checkpoint=path, resume=True, answers={"deploy:0": "allow"}))
    assert second.ok, second.summary()
    assert second.output("deploy") == "the bash call was allowed-once"
    assert [a.rule for a in second.steps["deploy"].approvals] == ["escalate"]


async def test_escalate_rejects_without_an_answer_before_the_deadline(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("ops")
    wf.prompt("deploy", "DEPLOY now")

    async def slow(interrupt: Interrupt) -> str:
        await trio.sleep(500)
        return "allow"

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), approvals=escalate(lambda r: None, timeout=100), answers=slow))
    assert result.ok, result.summary()
    assert result.output("deploy") == "the bash call was rejected"
    assert result.steps["deploy"].approvals[0].outcome == "rejected"


async def test_escalate_lets_the_policy_decide_first(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("ops")
    wf.prompt("deploy", "DEPLOY now")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), approvals=escalate(allow_tools("bash"), timeout=1)))
    assert result.output("deploy") == "the bash call was allowed-once"
    assert result.pending == ()


async def test_events_stream_while_the_run_goes(sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock) -> None:
    path = tmp_path / "c"
    seen: list[WorkflowEvent] = []
    async with open_workflow(branches(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path)) as run:
        async for event in run.events():
            seen.append(event)
        result = await run.result()
    assert result.status == "interrupted"
    kinds = [(e.kind, e.step) for e in seen]
    assert kinds[:2] == [("started", "hosts"), ("finished", "hosts")]
    assert ("started", "approve") in kinds
    interrupted = [e for e in seen if e.kind == "interrupted"]
    assert sorted(e.interrupt.id for e in interrupted) == ["approve[0]:0", "approve[1]:0"]
    assert kinds[-1] == ("skipped", "publish")
    assert [e.time for e in seen] == sorted(e.time for e in seen)

    resumed: list[tuple[str, str, int | None]] = []
    async with open_workflow(branches(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, resume=True, answers={"approve[0]:0": "yes", "approve[1]:0": "yes"})) as run:
        async for event in run.events():
            resumed.append((event.kind, event.step, event.index))
    assert resumed[0] == ("resumed", "hosts", None)
    assert ("finished", "publish", None) in resumed
    assert (await run.result()).ok


async def test_turn_events_and_a_reader_that_falls_behind(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("one")
    wf.prompt("draft", "DRAFT it")
    async with open_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)), turn_events=True) as run:
        events = run.events()
        slow = run.events(capacity=2)
        turns = [e async for e in events if e.kind == "turn"]
    assert (await run.result()).ok
    assert turns and all(e.step == "draft" and e.session_id for e in turns)
    assert {e.notification.method for e in turns} >= {"session.event"}
    with pytest.raises(SubscriberOverflowError):
        async for _ in slow:
            pass


async def test_an_error_of_the_run_comes_from_result(sim_spec: SpecFactory, tmp_path: Path) -> None:
    wf = Workflow("w")
    wf.prompt("a", "DRAFT")
    (tmp_path / "c").write_text("x")
    with trio.fail_after(10):
        async with open_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=tmp_path / "c")) as run:
            with pytest.raises(Exception, match="exists already"):
                await run.result()


