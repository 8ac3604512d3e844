"""Checkpoints in process (simulator, virtual time): reuse of completed work, typed outputs read
back, changed steps, journal errors, compaction. Prompts are counted on the wire (WireMeter)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest
import trio
from trio.testing import MockClock

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import (
    CheckpointError,
    StepContext,
    Workflow,
    WorkflowResult,
    checkpoint_changes,
    compact_checkpoint,
    run_workflow,
)

from .workflow_support import WireMeter
from dsh_orchestra.workflow import WorkflowOptions

SpecFactory = Callable[..., RuntimeSpec]

SCRIPT = """
[[rules]]
name = "review"
match = "REVIEW"
reply = '''```json
{"file": "f", "verdict": "approve"}
```'''
delay = 1.0

[[rules]]
name = "summary"
match = "SUMMARY"
reply = "all good"

[[rules]]
name = "summary2"
match = "RESUME"
reply = "all fine"

[[rules]]
name = "other"
match = "OTHER"
reply = "other"
"""


@attrs.frozen
class Review:
    file: str
    verdict: str


def review_workflow(summary: str = "SUMMARY of {review}") -> Workflow:
    wf = Workflow("review")

    @wf.step()
    async def files(ctx: StepContext) -> list[str]:
        return [f"f{i}.py" for i in range(5)]

    wf.prompt("review", "REVIEW {item}", fan_out="files", output=Review)
    wf.prompt("summary", summary, depends_on="review")
    wf.prompt("other", "OTHER thing")

    @wf.step(depends_on="summary")
    async def final(ctx: StepContext) -> dict[str, Any]:
        return {"summary": ctx.inputs["summary"], "n": 5}

    return wf


def comparable(result: WorkflowResult) -> dict[str, Any]:
    """The result without timings and session ids (which differ from run to run)."""
    data = result.to_json()
    data.pop("duration_s")
    for step in data["steps"].values():
        step.pop("started_s"), step.pop("duration_s")
        for item in step["items"]:
            item.pop("started_s"), item.pop("duration_s"), item.pop("session_id")
    return data


async def test_a_resumed_run_reuses_completed_steps_and_reads_typed_outputs_back(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    path = tmp_path / "run.ckpt"
    meter = WireMeter()
    first = await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), checkpoint=path))
    assert first.ok, first.summary()
    assert meter.prompts == 7
    again = WireMeter()
    second = await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=again), checkpoint=path, resume=True))
    assert again.prompts == 0
    assert comparable(second) == comparable(first)
    assert second.output("review") == [Review("f", "approve")] * 5  # structured back into Review
    assert isinstance(second.output("final"), dict)


async def test_a_crash_in_a_fan_out_loses_only_the_items_in_flight(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    """Cancel the run (a crash, as far as the journal knows) once 3 of 5 reviews completed."""
    path = tmp_path / "run.ckpt"
    script = SCRIPT.replace("delay = 1.0", "delay = 0.5")
    wf = review_workflow()
    delays = {f"f{i}.py": float(i) for i in range(5)}  # f0 done at 0.5 s, f1 at 1.5 s, ... f4 at 4.5 s
    wf.steps.pop("review")
    wf.step("review", fan_out="files")(_slow_review(delays))
    meter = WireMeter()
    with trio.move_on_after(3.0):
        await run_workflow(wf, WorkflowOptions(spec=sim_spec(script, meter=meter), checkpoint=path))
    with sqlite3.connect(path) as db:
        (done,) = db.execute("SELECT count(*) FROM items WHERE path = 'review'").fetchone()
    assert done == 3
    again = WireMeter()
    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(script, meter=again), checkpoint=path, resume=True))
    assert result.ok, result.summary()
    assert again.prompts == 3  # f3 and f4 again (in flight at the crash), then summary ("other" completed)
    assert [r.file for r in result.output("review")] == [f"f{i}.py" for i in range(5)]


def _slow_review(delays: dict[str, float]) -> Any:
    async def review(ctx: StepContext) -> Review:
        await trio.sleep(delays[ctx.item])
        await ctx.prompt(f"REVIEW {ctx.item}")
        return Review(file=ctx.item, verdict="approve")

    return review


async def test_a_changed_prompt_reruns_that_step_and_its_dependents_only(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    path = tmp_path / "run.ckpt"
    await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    changed = review_workflow(summary="RESUME the reviews: {review}")
    changes = checkpoint_changes(changed, path)
    assert changes.changed == ("summary",)
    assert set(changes.reusable) == {"files", "review", "summary", "other", "final"} - {"summary"}
    meter = WireMeter()
    result = await run_workflow(changed, WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), checkpoint=path, resume=True))
    assert result.ok, result.summary()
    assert meter.prompts == 1  # the summary only: reviews and "other" are reused
    assert result.output("summary") == "all fine"
    assert result.output("final") == {"summary": "all fine", "n": 5}  # the dependent ran again


async def test_a_dependent_reruns_even_when_the_changed_step_answers_the_same(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    path = tmp_path / "run.ckpt"
    calls: list[str] = []
    wf = review_workflow()
    wf.steps.pop("final")

    @wf.step(depends_on="summary")
    async def final(ctx: StepContext) -> str:
        calls.append(ctx.inputs["summary"])
        return "done"

    await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    wf.steps.pop("summary")
    wf.prompt("summary", "SUMMARY (edited) of {review}", depends_on="review")
    await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, resume=True))
    assert calls == ["all good", "all good"]


async def test_runtime_options_are_not_part_of_the_fingerprint(tmp_path: Path, sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    path = tmp_path / "run.ckpt"
    await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    wf = review_workflow()
    wf.steps["summary"] = attrs.evolve(wf.steps["summary"], timeout=30.0, retries=3, concurrency=2)
    assert checkpoint_changes(wf, path).changed == ()


async def test_journal_errors_name_what_to_fix(tmp_path: Path, sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    path = tmp_path / "run.ckpt"
    with pytest.raises(CheckpointError, match="no checkpoint") as missing:
        await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, resume=True))
    assert missing.value.parameter == "checkpoint"
    await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, inputs={"x": 1}))
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match="exists already") as exists:
        await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    assert exists.value.parameter == "resume"
    assert path.read_bytes() == before  # nothing overwritten
    with pytest.raises(CheckpointError, match="other workflow inputs") as inputs:
        await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, resume=True, inputs={"x": 2}))
    assert inputs.value.parameter == "inputs"
    with pytest.raises(CheckpointError, match="belongs to workflow 'review', not 'other'"):
        checkpoint_changes(_named("other"), path, inputs={"x": 1})
    junk = tmp_path / "junk.ckpt"
    junk.write_text("not a database, just text\n" * 100)
    with pytest.raises(CheckpointError, match="is not a checkpoint"):
        await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=junk, resume=True))
    with pytest.raises(CheckpointError, match="needs the checkpoint"):
        await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), resume=True))


def _named(name: str) -> Workflow:
    wf = Workflow(name)
    wf.prompt("a", "OTHER")
    return wf


async def test_an_output_the_journal_cannot_hold_fails_the_step_clearly(
    tmp_path: Path, sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    wf = Workflow("odd")

    @wf.step()
    async def odd(ctx: StepContext) -> object:
        return object()

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=tmp_path / "c"))
    assert result.status == "failed"
    assert "cannot be stored in the checkpoint" in result.steps["odd"].errors[0].message


async def test_compaction_keeps_the_final_result_and_a_resume_still_reuses_it(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    path = tmp_path / "run.ckpt"
    await run_workflow(review_workflow(summary="RESUME {review}"), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    first = await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, resume=True))
    before, after = compact_checkpoint(path)
    assert after <= before
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM items").fetchone() == (0,)
        assert db.execute("SELECT count(*) FROM result").fetchone() == (1,)
    meter = WireMeter()
    second = await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT, meter=meter), checkpoint=path, resume=True))
    assert meter.prompts == 0
    assert comparable(second) == comparable(first)
    assert second.output("review")[0] == Review("f", "approve")


async def test_compaction_refuses_an_unfinished_run(tmp_path: Path, sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    path = tmp_path / "run.ckpt"
    wf = Workflow("ask")

    @wf.step()
    async def ask(ctx: StepContext) -> str:
        return await ctx.interrupt("go?")

    result = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path))
    assert result.status == "interrupted"
    with pytest.raises(CheckpointError, match=r"waits for answers \(ask:0\)"):
        compact_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        compact_checkpoint(tmp_path / "missing")


async def test_a_named_session_is_resumed_from_the_store_on_resume(
    sim_spec: SpecFactory, tmp_path: Path, autojump_clock: MockClock
) -> None:
    """The in-process simulator keeps a store per spec here: the same store across both runs."""
    store = tmp_path / "store"
    path = tmp_path / "run.ckpt"
    wf = Workflow("chat")
    wf.prompt("first", "SUMMARY one", session="writer")

    @wf.step(depends_on="first")
    async def gate(ctx: StepContext) -> str:
        return await ctx.interrupt("continue?")

    wf.prompt("second", "OTHER two", session="writer", depends_on="gate")
    first = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT, store=str(store)), checkpoint=path))
    assert first.status == "interrupted"
    meter = WireMeter()
    second = await run_workflow(wf, WorkflowOptions(spec=sim_spec(SCRIPT, store=str(store), meter=meter), checkpoint=path, resume=True, answers={"gate:0": "yes"}))
    assert second.ok, second.summary()
    assert second.steps["second"].items[0].session_id == first.steps["first"].items[0].session_id
    assert meter.prompts == 1


async def test_resuming_a_checkpoint_killed_before_its_first_commit_starts_afresh(
    tmp_path: Path, sim_spec: SpecFactory, autojump_clock: MockClock
) -> None:
    path = tmp_path / "run.ckpt"
    sqlite3.connect(path).close()  # the file exists, with no table yet
    path.touch()
    result = await run_workflow(review_workflow(), WorkflowOptions(spec=sim_spec(SCRIPT), checkpoint=path, resume=True))
    assert result.ok, result.summary()
    assert checkpoint_changes(review_workflow(), path).reusable == ("files", "review", "summary", "other", "final")
