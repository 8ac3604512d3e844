"""Typed outputs with bounded re-prompting of the same session; subagent results collected and typed."""

from __future__ import annotations

from typing import Callable, Literal

import attrs
from trio.testing import MockClock

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import Statistics, StepContext, Workflow, WorkflowOptions, run_workflow

from .workflow_support import WireMeter

SpecFactory = Callable[..., RuntimeSpec]


@attrs.frozen
class Review:
    file: str
    verdict: Literal["approve", "changes"]
    issues: list[str] = attrs.field(factory=list)


@attrs.frozen
class Scored:
    file: str
    score: int


@attrs.frozen
class Count:
    word: str
    count: int


SCRIPT = r'''
[[rules]]
name = "repair"
match = "Your previous answer could not be used"
reply = """```json
{"file": "messy.py", "verdict": "changes", "issues": ["fixed on request"]}
```"""

[[rules]]
name = "good"
match = "REVIEW good.py"
reply = """Looks fine.
```json
{"file": "good.py", "verdict": "approve"}
```"""

[[rules]]
name = "messy"
match = "REVIEW messy.py"
reply = "I think messy.py needs changes: the parser leaks."

[[rules]]
name = "map"
regex = "^MAP"
reply = "Started two counters."
after_subagents = "Both counters reported."

[[rules.spawn]]
description = "count alpha"
prompt = "COUNT alpha"
reply = '{"word": "alpha", "count": 3}'
delay = 2.0

[[rules.spawn]]
description = "count beta"
prompt = "COUNT beta"
reply = '{"word": "beta", "count": 5}'
delay = 1.0

[[rules]]
name = "map-bad"
match = "BADMAP"
reply = "Started one counter."
after_subagents = "done"

[[rules.spawn]]
description = "count badly"
prompt = "COUNT badly"
reply = "I counted quite a few."
'''


def review_workflow(files: list[str], *, output: type = Review, parse_attempts: int = 2) -> Workflow:
    wf = Workflow("review")

    @wf.step()
    async def files_(ctx: StepContext) -> list[str]:
        return files

    wf.prompt("review", "REVIEW {item}", fan_out="files_", output=output, parse_attempts=parse_attempts)
    return wf


async def test_a_bad_answer_is_re_prompted_in_the_same_session(sim_spec: SpecFactory) -> None:
    meter, stats = WireMeter(), Statistics()
    result = await run_workflow(review_workflow(["good.py", "messy.py"]), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), statistics=stats))
    assert result.ok, result.summary()
    assert result.output("review") == [
        Review(file="good.py", verdict="approve"),
        Review(file="messy.py", verdict="changes", issues=["fixed on request"]),
    ]
    good, messy = result.steps["review"].items
    assert (good.reprompts, messy.reprompts) == (0, 1)
    assert meter.prompts_by_session[good.session_id or ""] == 1
    assert meter.prompts_by_session[messy.session_id or ""] == 2  # the repair went to the same session
    assert stats.prompts == 3 and stats.reprompts == 1


async def test_re_prompting_is_bounded_then_the_step_fails(sim_spec: SpecFactory) -> None:
    """The repair answer lacks ``score`` too: after 2 repairs the item fails with the parse error."""
    meter = WireMeter()
    result = await run_workflow(review_workflow(["messy.py"], output=Scored), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter)))
    assert result.status == "failed"
    (item,) = result.steps["review"].items
    assert item.status == "failed" and item.attempts == 1 and item.reprompts == 2
    assert item.error is not None and item.error.type == "OutputParseError"
    assert item.error.message == "the response is not a valid Scored: required field missing @ $.score"
    assert item.final_response is not None and "fixed on request" in item.final_response  # the last answer is kept
    assert meter.prompts_by_session[item.session_id or ""] == 3


async def test_parse_attempts_zero_never_re_prompts(sim_spec: SpecFactory) -> None:
    meter = WireMeter()
    result = await run_workflow(review_workflow(["messy.py"], parse_attempts=0), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter)))
    assert result.status == "failed" and meter.prompts == 1
    assert "no JSON found" in result.steps["review"].errors[0].message


async def test_function_steps_get_typed_outputs_too(sim_spec: SpecFactory) -> None:
    wf = Workflow("fn")

    @wf.step()
    async def both(ctx: StepContext) -> list[Review]:
        return [await ctx.prompt(f"REVIEW {name}", output=Review) for name in ("good.py", "messy.py")]

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert [r.file for r in result.output("both")] == ["good.py", "messy.py"]
    assert result.steps["both"].items[0].reprompts == 1


async def test_subagent_results_are_collected_and_typed(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("map")
    wf.prompt("map", "MAP words", subagent_output=Count)

    @wf.step(depends_on="map")
    async def total(ctx: StepContext) -> int:
        counts: tuple[Count, ...] = ctx.results["map"].subagent_outputs
        return sum(c.count for c in counts)

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert result.ok, result.summary()
    step = result.steps["map"]
    assert step.output == "Both counters reported."  # session/wait waited for the children and the follow-up turn
    assert [s.text for s in step.subagents] == ['{"word": "beta", "count": 5}', '{"word": "alpha", "count": 3}']
    assert all(s.status == "ok" and s.stop_reason == "completed" and s.parent_session_id == step.items[0].session_id for s in step.subagents)
    assert step.subagent_outputs == (Count("beta", 5), Count("alpha", 3))  # completion order, paired with subagents
    assert step.items[0].subagent_outputs == step.subagent_outputs
    assert result.output("total") == 8


async def test_untyped_subagents_are_still_collected(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    wf = Workflow("map")
    wf.prompt("map", "MAP words")
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    assert len(result.steps["map"].subagents) == 2 and result.steps["map"].subagent_outputs == ()


async def test_a_subagent_output_that_does_not_parse_fails_the_step(sim_spec: SpecFactory) -> None:
    wf = Workflow("map")
    wf.prompt("map", "BADMAP", subagent_output=Count)
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT)))
    (error,) = result.steps["map"].errors
    assert error.type == "OutputParseError" and "subagent" in error.message and "no JSON found" in error.message
    assert len(result.steps["map"].items[0].subagents) == 1  # what the child said is still on the result
