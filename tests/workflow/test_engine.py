"""Running graphs on the in-process simulator: joins in input order, routes, sessions, inputs."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.pool import open_pool
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.session import open_runtime
from dsh_orchestra.workflow import StepContext, Workflow, WorkflowOptions, run_workflow

from .workflow_support import WireMeter

SpecFactory = Callable[..., RuntimeSpec]

ORDER_SCRIPT = """
default_reply = "echo: {prompt}"

[[rules]]
name = "slow"
match = "ITEM a"
reply = "A"
delay = 4.0

[[rules]]
name = "medium"
match = "ITEM b"
reply = "B"
delay = 2.0

[[rules]]
name = "fast"
match = "ITEM c"
reply = "C"
delay = 0.5
"""


def fan_workflow(items: list[Any]) -> Workflow:
    wf = Workflow("fan")

    @wf.step()
    async def source(ctx: StepContext) -> list[Any]:
        return items

    wf.prompt("work", "ITEM {item}", fan_out="source")

    @wf.step(depends_on="work")
    async def join(ctx: StepContext) -> str:
        return "".join(ctx.inputs["work"])

    return wf


async def test_join_gets_fanned_out_results_in_input_order(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    """Items finish c, b, a; the join still sees a, b, c, and each item had its own session."""
    result = await run_workflow(fan_workflow(["a", "b", "c"]), WorkflowOptions(spec=sim_spec(ORDER_SCRIPT)))
    assert result.ok, result.summary()
    assert result.output("work") == ["A", "B", "C"]
    assert result.output("join") == "ABC"
    items = result.steps["work"].items
    assert [i.index for i in items] == [0, 1, 2]
    finished = sorted(items, key=lambda i: (i.started_s or 0) + i.duration_s)
    assert [i.index for i in finished] == [2, 1, 0]
    assert len({i.session_id for i in items}) == 3
    assert 4.0 <= result.steps["work"].duration_s < 4.5  # in parallel: the slowest item's time


async def test_empty_fan_out_joins_an_empty_list(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    result = await run_workflow(fan_workflow([]), WorkflowOptions(spec=sim_spec(ORDER_SCRIPT)))
    assert result.ok and result.output("work") == [] and result.output("join") == ""


async def test_fan_out_over_something_not_a_list_fails_the_step(sim_spec: SpecFactory) -> None:
    wf = Workflow("bad")

    @wf.step()
    async def source(ctx: StepContext) -> str:
        return "abc"

    wf.prompt("work", "ITEM {item}", fan_out="source")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT)))
    assert result.status == "failed"
    assert result.steps["work"].errors[0].message == "fan-out source 'source' returned str, not a list"


async def test_prompt_step_values_dependencies_inputs_and_item(sim_spec: SpecFactory) -> None:
    wf = Workflow("values")

    @wf.step()
    async def topic(ctx: StepContext) -> str:
        return f"{ctx.workflow_inputs['subject']}!"

    wf.prompt("ask", "Tell me about {topic} for {audience} (attempt {attempt})", depends_on="topic")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT), inputs={"subject": "trio", "audience": "ops"}))
    assert result.output("ask") == "echo: Tell me about trio! for ops (attempt 1)"
    item = result.steps["ask"].items[0]
    assert item.index is None and item.finish_reason == "completed" and item.session_id


async def test_function_steps_prompt_through_the_context(sim_spec: SpecFactory) -> None:
    wf = Workflow("fn")

    @wf.step()
    async def chat(ctx: StepContext) -> list[str]:
        first = await ctx.prompt("one", session="chat")
        second = await ctx.prompt("two", session="chat")
        fresh = await ctx.prompt("three")
        return [first, second, fresh, *(t.session_id for t in ctx.turns)]

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT)))
    first, second, fresh, s1, s2, s3 = result.output("chat")
    assert (first, second, fresh) == ("echo: one", "echo: two", "echo: three")
    assert s1 == s2 != s3


async def test_named_session_is_reused_across_steps(sim_spec: SpecFactory) -> None:
    """Steps naming one session talk to the same runtime session, one after the other."""
    meter = WireMeter()
    wf = Workflow("named")
    wf.prompt("draft", "draft it", session="writer")
    wf.prompt("polish", "polish {draft}", depends_on="draft", session="writer")
    wf.prompt("other", "unrelated")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT, meter=meter)))
    assert result.ok
    draft, polish, other = (result.steps[n].items[0].session_id for n in ("draft", "polish", "other"))
    assert draft == polish != other
    assert meter.prompts_by_session[draft or ""] == 2


async def test_named_session_on_a_pool_stays_on_its_runtime(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    meters = [WireMeter(), WireMeter()]
    wf = Workflow("pinned")
    for i in range(6):
        wf.prompt(f"s{i}", f"turn {i}", session="chat", depends_on=[f"s{i - 1}"] if i else None)
        if i:  # competes for the least-loaded runtime with each chat turn: placement alone would move "chat"
            wf.prompt(f"hog{i}", "ITEM a", depends_on=f"s{i - 1}")
    async with open_pool(
        lambda i: sim_spec(ORDER_SCRIPT, meter=meters[i], name=f"sim#{i}"), size=2, max_sessions=1
    ) as pool:
        result = await run_workflow(wf, pool)
    assert result.ok, result.summary()
    sessions = {result.steps[f"s{i}"].items[0].session_id for i in range(6)}
    assert len(sessions) == 1
    (chat,) = sessions
    assert sorted(m.prompts_by_session.get(chat or "", 0) for m in meters) == [0, 6]
    # The lease is taken on the session's own runtime, so its limit holds there too.
    assert [m.max_in_flight <= 1 for m in meters] == [True, True]


async def test_route_chooses_the_next_step(sim_spec: SpecFactory) -> None:
    wf = Workflow("route")

    @wf.step()
    async def grade(ctx: StepContext) -> int:
        return int(ctx.workflow_inputs["score"])

    @wf.step()
    async def accept(ctx: StepContext) -> str:
        return f"accepted {ctx.inputs['grade']}"  # a route target receives the source's output

    @wf.step()
    async def reject(ctx: StepContext) -> str:
        return "rejected"

    @wf.step(depends_on="reject")
    async def notify(ctx: StepContext) -> str:
        return "notified"

    wf.route("grade", lambda score: "accept" if score >= 5 else "reject", ["accept", "reject"])
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT), inputs={"score": 7}))
    assert result.ok
    assert result.output("accept") == "accepted 7"
    assert result.steps["reject"].status == "skipped"
    assert result.steps["reject"].reason == "not chosen by the route from 'grade'"
    assert result.steps["notify"].status == "skipped" and result.steps["notify"].reason == "dependency 'reject' skipped"

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT), inputs={"score": 2}))
    assert [result.steps[n].status for n in ("accept", "reject", "notify")] == ["skipped", "ok", "ok"]


@pytest.mark.parametrize(
    ("choose", "statuses"),
    [
        (lambda out: None, ["skipped", "skipped"]),
        (lambda out: ["left", "right"], ["ok", "ok"]),
    ],
)
async def test_route_may_choose_none_or_several(sim_spec: SpecFactory, choose: Any, statuses: list[str]) -> None:
    wf = Workflow("route")
    for name in ("source", "left", "right"):
        wf.step(name)(_const(name))
    wf.route("source", choose, ["left", "right"])
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT)))
    assert result.ok
    assert [result.steps["left"].status, result.steps["right"].status] == statuses


async def test_a_route_choosing_an_unknown_step_fails_its_source(sim_spec: SpecFactory) -> None:
    wf = Workflow("route")
    for name in ("source", "left"):
        wf.step(name)(_const(name))
    wf.route("source", lambda out: "elsewhere", ["left"])
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT), failure="collect"))
    assert result.status == "failed"
    source = result.steps["source"]
    assert source.status == "failed" and source.reason == "its route failed"
    assert "chose ['elsewhere'], not among its targets ['left']" in source.errors[0].message
    assert result.steps["left"].status == "skipped"


async def test_runs_on_a_runtime_the_caller_opened(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    async with open_runtime(sim_spec(ORDER_SCRIPT)) as runtime:
        first = await run_workflow(fan_workflow(["c"]), runtime)
        second = await run_workflow(fan_workflow(["c", "c"]), runtime)
        assert runtime.alive
    assert first.output("join") == "C" and second.output("join") == "CC"


async def test_contradictory_arguments_are_rejected(sim_spec: SpecFactory) -> None:
    wf = fan_workflow([])
    async with open_runtime(sim_spec(ORDER_SCRIPT)) as runtime:
        with pytest.raises(ValueError, match="approvals only apply when run_workflow opens the runtimes"):
            await run_workflow(wf, runtime, WorkflowOptions(approvals=lambda request: None))
    with pytest.raises(ValueError, match="failure must be"):
        await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT), failure="sometimes"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1"):
        await run_workflow(wf, WorkflowOptions(spec=sim_spec(ORDER_SCRIPT), concurrency=0))
    with pytest.raises(ValueError, match="needs a spec"):
        await run_workflow(wf, WorkflowOptions(runtimes=2))


def _const(value: str) -> Any:
    async def step(ctx: StepContext) -> str:
        await trio.lowlevel.checkpoint()
        return value

    return step
