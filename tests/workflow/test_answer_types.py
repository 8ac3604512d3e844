"""Issue 31 part 7: an answer of the wrong type never reaches a typed step. The type comes
from the Python side (the asking step's ``-> int``/``-> float``/``-> bool`` when the interrupt
has no choices; the checkpoint records none): the engine refuses such an answer and returns a
good one as that type, and ``dsh-orchestra run --answer`` exits 2 naming the interrupt and the
type before anything runs."""

from __future__ import annotations

import json
import os
import pty
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.workflow import Interrupt, StepContext, Workflow, WorkflowOptions, answer_type, run_workflow, typed_answer

SpecFactory = Callable[..., RuntimeSpec]
CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]

RECIPE = '''
from dsh_orchestra.workflow import StepContext, Workflow

workflow = Workflow("typed")


@workflow.step()
async def count(ctx: StepContext) -> int:
    return await ctx.interrupt("how many replicas?")


@workflow.step(depends_on="count")
async def confirm(ctx: StepContext) -> bool:
    return await ctx.interrupt(f"deploy {ctx.inputs['count']} replicas?")
'''


def typed() -> Workflow:
    wf = Workflow("typed")

    @wf.step()
    async def count(ctx: StepContext) -> int:
        return await ctx.interrupt("how many?")  # type: ignore[no-any-return]

    @wf.step()
    async def ratio(ctx: StepContext) -> float:
        return await ctx.interrupt("which ratio?")  # type: ignore[no-any-return]

    @wf.step()
    async def ok(ctx: StepContext) -> bool:
        return await ctx.interrupt("go on?")  # type: ignore[no-any-return]

    @wf.step()
    async def pick(ctx: StepContext) -> int:  # choices: the answer is one of them, as text
        return len(await ctx.interrupt("which?", choices=["one", "three"]))

    @wf.step()
    async def name(ctx: StepContext) -> str:
        return await ctx.interrupt("your name?")  # type: ignore[no-any-return]

    return wf


async def test_a_typed_step_gets_its_answer_as_its_type(sim_spec: SpecFactory) -> None:
    answers = {"count:0": " 42 ", "ratio:0": "2.5", "ok:0": "Yes", "pick:0": "three", "name:0": "42"}
    result = await run_workflow(typed(), WorkflowOptions(spec=sim_spec(""), answers=answers))
    assert result.ok, result.summary()
    assert {name: step.output for name, step in result.steps.items()} == {"count": 42, "ratio": 2.5, "ok": True, "pick": 5, "name": "42"}


@pytest.mark.parametrize(("step", "answer", "expected"), [
    ("count", "forty-two", "must be an integer: its step is annotated -> int"),
    ("count", "4.5", "must be an integer"),
    ("ratio", "nan", "must be a number: its step is annotated -> float"),
    ("ok", "maybe", "must be true or false (also yes/no): its step is annotated -> bool"),
])
async def test_a_mistyped_answer_fails_the_step_naming_the_interrupt(sim_spec: SpecFactory, step: str, answer: str,
                                                                     expected: str) -> None:
    answers = {"count:0": "1", "ratio:0": "1", "ok:0": "no", "pick:0": "one", "name:0": "x", f"{step}:0": answer}
    result = await run_workflow(typed(), WorkflowOptions(spec=sim_spec(""), answers=answers, failure="collect"))
    failed = result.steps[step]
    assert failed.status == "failed" and f"the answer {answer!r} to interrupt '{step}:0' {expected}" in failed.errors[0].message
    assert all(result.steps[other].status == "ok" for other in ("count", "ratio", "ok", "pick", "name") if other != step)


def test_the_type_is_found_through_fan_outs_and_subworkflows() -> None:
    child = Workflow("child")

    @child.step()
    async def size(ctx: StepContext) -> float:
        return 0.0

    parent = Workflow("parent")

    @parent.step()
    async def items(ctx: StepContext) -> list[int]:
        return [1, 2]

    @parent.step(fan_out="items")
    async def each(ctx: StepContext) -> int:
        return 0

    parent.subworkflow("sub", child, fan_out="items")
    assert answer_type(parent, Interrupt(id="each[1]:0", question="?")) is int
    assert answer_type(parent, Interrupt(id="sub[0]/size:2", question="?")) is float
    assert answer_type(parent, Interrupt(id="each[1]:0", question="?", choices=("a", "b"))) is None
    assert answer_type(parent, Interrupt(id="items:0", question="?")) is None  # -> list[int]: any text
    assert answer_type(parent, Interrupt(id="gone:0", question="?")) is None
    assert typed_answer("x:0", None, " as is ") == " as is "
    assert typed_answer("x:0", bool, "FALSE") is False and typed_answer("x:0", int, "-7") == -7


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "DSH_TELEMETRY_MODE": "DISABLED"})


def test_run_refuses_a_mistyped_answer_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "recipe.py").write_text(RECIPE)
    run = ["run", "recipe.py", "--checkpoint", "cp.sqlite", "--no-progress"]
    first = _run(run, tmp_path)
    assert first.returncode == 3, first.stderr  # count:0 waits for an answer
    assert "count:0: how many replicas?" in first.stderr
    before = (tmp_path / "cp.sqlite").read_bytes()
    wrong = _run([*run, "--resume", "--answer", "count:0=three"], tmp_path)
    assert wrong.returncode == 2, wrong.stderr
    assert ("--answer count:0=three: the answer 'three' to interrupt 'count:0' must be an integer: its step is "
            "annotated -> int") in wrong.stderr and "Traceback" not in wrong.stderr
    assert (tmp_path / "cp.sqlite").read_bytes() == before  # nothing ran
    second = _run([*run, "--resume", "--answer", "count:0=3"], tmp_path)
    assert second.returncode == 3, second.stderr  # now confirm:0 waits
    wrong = _run([*run, "--resume", "--answer", "confirm:0=perhaps"], tmp_path)
    assert wrong.returncode == 2 and "must be true or false (also yes/no): its step is annotated -> bool" in wrong.stderr
    done = _run([*run, "--resume", "--answer", "confirm:0=yes", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    outputs: dict[str, Any] = {name: step["output"] for name, step in json.loads(done.stdout)["steps"].items()}
    assert outputs == {"count": 3, "confirm": True}


def test_the_terminal_asks_again_until_the_answer_reads_as_the_type(tmp_path: Path) -> None:
    """On a pty (stdin a terminal) a mistyped answer is refused with the reason and asked again."""
    (tmp_path / "recipe.py").write_text(RECIPE)
    master, slave = pty.openpty()
    process = subprocess.Popen([*CLI, "run", "recipe.py", "--json", "--no-progress"], stdin=slave, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "DSH_TELEMETRY_MODE": "DISABLED"})
    os.close(slave)
    seen = b""

    def wait_for(text: bytes, count: int) -> None:
        nonlocal seen
        deadline = time.monotonic() + 60
        assert process.stderr is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            while seen.count(text) < count:
                assert time.monotonic() < deadline, seen
                if selector.select(timeout=1):
                    chunk = os.read(process.stderr.fileno(), 4096)
                    assert chunk, seen
                    seen += chunk

    try:
        prompt = b"(empty: answer later) >"
        wait_for(prompt, 1)
        os.write(master, b"three\n")
        wait_for(prompt, 2)
        assert b"dsh-orchestra: the answer 'three' to interrupt 'count:0' must be an integer: its step is annotated -> int" in seen
        os.write(master, b"3\n")
        wait_for(b"deploy 3 replicas?", 1)
        wait_for(prompt, 3)
        os.write(master, b"yes\n")
        stdout, _ = process.communicate(timeout=60)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, seen
    assert {name: step["output"] for name, step in json.loads(stdout)["steps"].items()} == {"count": 3, "confirm": True}
