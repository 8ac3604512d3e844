"""Workflow definitions: the builder API and graph validation (pure, no trio)."""

from __future__ import annotations

from typing import Any

import pytest

from dsh_orchestra.workflow import Workflow, WorkflowDefinitionError


async def noop(ctx: Any) -> None:
    return None


def test_builder_records_steps_dependencies_and_routes() -> None:
    wf = Workflow("w")

    @wf.step()
    async def files(ctx: Any) -> list[str]:
        return ["a"]

    review = wf.prompt("review", "REVIEW {item}", fan_out="files", retries=2, timeout=5, concurrency=3)
    wf.prompt("summary", "SUM {review}", depends_on="review", session="writer")
    wf.step("a", depends_on="summary")(noop)
    wf.step("b", depends_on=["summary"])(noop)
    wf.route("summary", lambda out: "a", ["a", "b"])

    assert review.depends_on == ("files",)  # the fan-out source is a dependency
    assert wf.steps["files"].fn is files and not wf.steps["files"].prompts
    assert wf.steps["review"].prompts and wf.steps["review"].retries == 2
    assert wf.steps["summary"].session == "writer"
    assert wf.dependencies("a") == ("summary",)
    assert wf.validate() == ["files", "review", "summary", "a", "b"]


def test_route_sources_count_as_dependencies() -> None:
    wf = Workflow("w")
    wf.step("judge")(noop)
    wf.step("left")(noop)
    wf.step("right")(noop)
    wf.route("judge", lambda out: "left", ["left", "right"])
    assert wf.dependencies("left") == ("judge",)
    order = wf.validate()
    assert order.index("judge") < order.index("left") and order.index("judge") < order.index("right")


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda wf: wf.step("x", depends_on="nope")(noop), "depends on unknown step 'nope'"),
        (lambda wf: (wf.step("x")(noop), wf.route("x", lambda o: "y", ["y"])), "names unknown step 'y'"),
        (
            lambda wf: (wf.step("x", depends_on="y")(noop), wf.step("y", depends_on="x")(noop)),
            "has a cycle: x -> y -> x",
        ),
        (lambda wf: None, "has no steps"),
    ],
)
def test_validate_rejects_malformed_graphs(build: Any, message: str) -> None:
    wf = Workflow("w")
    build(wf)
    with pytest.raises(WorkflowDefinitionError, match=message):
        wf.validate()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda wf: (wf.step("x")(noop), wf.step("x")(noop)), "already has a step named 'x'"),
        (lambda wf: wf.prompt("x", "p", retries=-1), "retries and parse_attempts must be >= 0"),
        (lambda wf: wf.prompt("x", "p", timeout=0), "timeout must be a positive"),
        (lambda wf: wf.prompt("x", "p", concurrency=0), "concurrency must be >= 1"),
        (lambda wf: wf.prompt("x", "p", backoff=-1), "backoff must be >= 0"),
        (lambda wf: wf.prompt("x", "p", fan_out="src", session="s"), "one fresh session per item"),
        (lambda wf: wf.step("x")(lambda ctx: None), "must be an async function"),
        (lambda wf: (wf.step("x")(noop), wf.route("x", lambda o: None, [])), "needs at least one target"),
        (
            lambda wf: (wf.step("x")(noop), wf.step("y")(noop), wf.route("x", str, ["y"]), wf.route("x", str, ["y"])),
            "already has a route",
        ),
    ],
)
def test_builder_rejects_bad_steps(build: Any, message: str) -> None:
    with pytest.raises(WorkflowDefinitionError, match=message):
        build(Workflow("w"))


def test_a_workflow_needs_a_name() -> None:
    with pytest.raises(WorkflowDefinitionError, match="non-empty name"):
        Workflow("")


def test_render_templates() -> None:
    wf = Workflow("w")
    step = wf.prompt("x", "review {item} ({index}, attempt {attempt}) {{literal}}")
    assert step.render({"item": "a.py", "index": 0, "attempt": 1}) == "review a.py (0, attempt 1) {literal}"
    fn = wf.prompt("y", lambda values: f"n={len(values['items'])}")
    assert fn.render({"items": [1, 2]}) == "n=2"
    with pytest.raises(WorkflowDefinitionError, match=r"names \{missing\}.*it can use: item"):
        wf.prompt("z", "{missing}").render({"item": 1})
