"""Recipes end to end on the REAL runtime (bundled ``dsh --profile sdk``) driven by the scripted
model server on 127.0.0.1, with the recipe's own scenario.toml."""

from __future__ import annotations

from typing import Callable

import pytest
import trio

from dsh_orchestra.workflow import WorkflowOptions, load_recipe
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._fake_model import FakeModelServer
from dsh_orchestra.testing._script import Script, load_script
from dsh_orchestra.workflow import StepContext, Workflow, run_workflow

from .workflow_support import RECIPES, children_pids

pytestmark = pytest.mark.integration

@pytest.fixture
def recipe_name() -> str:
    return "code_review"


@pytest.fixture
def model_script(recipe_name: str) -> Script:
    """The fake model plays the recipe's own scenario."""
    return load_script(RECIPES / recipe_name / "scenario.toml")


async def test_code_review_recipe_on_the_real_runtime(
    dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer
) -> None:
    recipe = load_recipe(RECIPES / "code_review")
    with trio.fail_after(240):  # a start took 37-60+ s under disk contention
        result = await run_workflow(recipe.workflow, WorkflowOptions(spec=dsh_spec(), inputs=recipe.inputs, concurrency=3))
    assert result.ok, result.summary()
    reviews = result.output("review")
    assert [(r.file, r.verdict) for r in reviews] == [
        ("src/lexer.py", "approve"), ("src/parser.py", "request-changes"), ("src/legacy.py", "request-changes"),
    ]
    legacy = result.steps["review"].items[2]
    assert legacy.reprompts == 1  # the prose answer was re-prompted in the same real session
    assert result.output("summary").approved == ["src/lexer.py"]
    rules = [r.rule for r in fake_model.requests if r.kind == "prompt"]
    assert sorted(r or "" for r in rules) == ["legacy", "lexer", "parser", "repair", "summary"]
    repair = next(r for r in fake_model.requests if r.rule == "repair")
    assert repair.session_id == legacy.session_id


@pytest.mark.parametrize("recipe_name", ["map_reduce"])
async def test_map_reduce_recipe_subagents_on_the_real_runtime(
    recipe_name: str, dsh_spec: Callable[..., RuntimeSpec], fake_model: FakeModelServer
) -> None:
    """Real subagents: each mapper's children report back, session/wait settles the tree."""
    recipe = load_recipe(RECIPES / recipe_name)
    with trio.fail_after(240):  # a start took 37-60+ s under disk contention
        result = await run_workflow(recipe.workflow, WorkflowOptions(spec=dsh_spec(), inputs=recipe.inputs))
    assert result.ok, result.summary()
    step = result.steps["map"]
    assert len(step.subagents) == 3 and all(s.stop_reason == "completed" for s in step.subagents)
    assert sorted((c.document, c.section) for c in step.subagent_outputs) == [
        ("changelog", "0.2"), ("handbook", "errors"), ("handbook", "intro"),
    ]
    reduced = result.output("reduce")
    assert [(t.term, t.count) for t in reduced.totals] == [("nursery", 7), ("cancel scope", 2)]


async def test_cancelling_a_workflow_on_the_real_runtime_leaves_no_process(dsh_spec: Callable[..., RuntimeSpec]) -> None:
    """The lexer review is slow (0.3 s): cancel while the reviews are in flight; dsh is reaped."""
    wf = Workflow("cancelled")
    running = trio.Event()
    seen: list[set[int]] = []

    @wf.step()
    async def review(ctx: StepContext) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ctx.prompt, "REVIEW src/lexer.py please")
            await trio.sleep(0.1)
            seen.append(children_pids())
            running.set()

    before = children_pids()
    with trio.fail_after(240):  # a start took 37-60+ s under disk contention
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await run_workflow(wf, WorkflowOptions(spec=dsh_spec()))

            nursery.start_soon(run)
            await running.wait()
            nursery.cancel_scope.cancel(reason="the test cancels the workflow")
    (during,) = seen
    assert len(during - before) >= 1
    assert children_pids() - before == set()
