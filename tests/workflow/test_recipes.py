"""Every recipe runs: in-process on the simulator, and through ``dsh-orchestra run`` as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
from trio.testing import MockClock

from dsh_orchestra.cli._main import build_parser
from dsh_orchestra.cli._run import parse_inputs
from dsh_orchestra.workflow import RecipeError, WorkflowOptions, load_recipe
from dsh_orchestra.runtime import RuntimeSpec
from dsh_orchestra.testing._script import load_script
from dsh_orchestra.workflow import run_workflow

from .workflow_support import RECIPES

SpecFactory = Callable[..., RuntimeSpec]
NAMES = ["code_review", "map_reduce", "judge"]
CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]


def check_code_review(outputs: dict[str, Any]) -> None:
    reviews = outputs["review"]
    assert [r["file"] for r in reviews] == ["src/lexer.py", "src/parser.py", "src/legacy.py"]  # input order
    assert [r["verdict"] for r in reviews] == ["approve", "request-changes", "request-changes"]
    assert outputs["summary"]["approved"] == ["src/lexer.py"]


def check_map_reduce(outputs: dict[str, Any]) -> None:
    assert outputs["map"] == [{"document": "handbook", "sections": 2}, {"document": "changelog", "sections": 1}]
    assert outputs["reduce"] == {
        "totals": [
            {"term": "nursery", "count": 7, "documents": ["changelog", "handbook"]},
            {"term": "cancel scope", "count": 2, "documents": ["handbook"]},
        ],
        "sections": 3,
        "subagents": 3,
    }


def check_judge(outputs: dict[str, Any]) -> None:
    assert outputs["judge"]["winner"] == "b"
    assert outputs["polish_a"] is None and outputs["polish_b"].startswith("Open the nursery")


CHECKS = {"code_review": check_code_review, "map_reduce": check_map_reduce, "judge": check_judge}


INTERRUPTED = ["review_with_human"]  # ends waiting for an answer: tests/workflow/test_durable_cli.py runs it with --answer


def test_every_recipe_directory_is_tested() -> None:
    assert sorted(p.name for p in RECIPES.iterdir() if (p / "recipe.py").is_file()) == sorted(NAMES + INTERRUPTED)


async def test_review_with_human_in_process_with_answers(sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    recipe = load_recipe(RECIPES / "review_with_human")
    assert recipe.script is not None
    spec = sim_spec(load_script(recipe.script))
    waiting = await run_workflow(recipe.workflow, WorkflowOptions(spec=spec, inputs=recipe.inputs))
    assert waiting.status == "interrupted" and [i.id for i in waiting.pending] == ["approval:0"]
    result = await run_workflow(recipe.workflow, WorkflowOptions(spec=spec, inputs=recipe.inputs, answers={"approval:0": "reject"}))
    assert result.ok, result.summary()
    assert result.output("revise").startswith("Batch retries wait at most 30 s")
    assert result.steps["publish"].status == "skipped"


@pytest.mark.parametrize("name", NAMES)
async def test_recipe_in_process(name: str, sim_spec: SpecFactory, autojump_clock: MockClock) -> None:
    recipe = load_recipe(RECIPES / name)
    assert recipe.script == (RECIPES / name / "scenario.toml").resolve()
    assert recipe.script is not None
    result = await run_workflow(recipe.workflow, WorkflowOptions(spec=sim_spec(load_script(recipe.script)), inputs=recipe.inputs))
    assert result.ok, result.summary()
    data = result.to_json()
    CHECKS[name]({step: data["steps"][step]["output"] for step in data["steps"]})
    if name == "code_review":
        legacy = result.steps["review"].items[2]
        assert legacy.reprompts == 1
    if name == "judge":  # the winner polished in the session that wrote its answer
        assert result.steps["polish_b"].items[0].session_id == result.steps["candidate_b"].items[0].session_id


@pytest.mark.parametrize("name", NAMES)
def test_recipe_through_the_cli(name: str, tmp_path: Path) -> None:
    chart = tmp_path / "graph.mmd"
    done = subprocess.run(
        [*CLI, "run", str(RECIPES / name / "recipe.py"), "--json", "--mermaid", str(chart)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "ok"
    CHECKS[name]({step: data["steps"][step]["output"] for step in data["steps"]})
    assert chart.read_text().startswith("flowchart TD\n")


def test_cli_prints_a_readable_summary_by_default(tmp_path: Path) -> None:
    done = subprocess.run([*CLI, "run", str(RECIPES / "judge")], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("workflow 'judge': ok in ")
    assert any(line.split()[:2] == ["polish_a", "skipped"] for line in lines)
    assert ".. not chosen by the route from 'judge'" in done.stdout


FAILING = '''
from dsh_orchestra.workflow import Workflow
SCRIPT = "fail.toml"
workflow = Workflow("failing")
workflow.prompt("boom", "BOOM")
workflow.prompt("after", "after {boom}", depends_on="boom")
'''


@pytest.mark.parametrize(
    ("files", "argv", "status", "message"),
    [
        ({}, ["run", "missing.py"], 2, "is not a Python file"),
        ({"r.py": "x = 1\n"}, ["run", "r.py"], 2, "must define a module-level `workflow = Workflow(...)`, found nothing"),
        ({"r.py": "raise RuntimeError('oops')\n"}, ["run", "r.py"], 2, "failed to load: RuntimeError: oops"),
        (
            {"r.py": "from dsh_orchestra.workflow import Workflow\nworkflow = Workflow('w')\n"},
            ["run", "r.py"], 2, "has no steps",
        ),
        ({"r.py": FAILING.replace('SCRIPT = "fail.toml"', 'SCRIPT = "nope.toml"')}, ["run", "r.py"], 2, "does not exist"),
        ({"r.py": FAILING, "fail.toml": ""}, ["run", "r.py", "--input", "novalue"], 2, "--input takes KEY=VALUE"),
        ({"r.py": FAILING, "fail.toml": ""}, ["run", "r.py", "--runtime", "dsh"], 2, "needs --dsh-home"),
        ({"r.py": FAILING, "fail.toml": ""}, ["run", "r.py", "--concurrency", "0"], 2, "concurrency must be"),
    ],
)
def test_cli_exit_status_2_for_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    files: dict[str, str], argv: list[str], status: int, message: str,
) -> None:
    """In-process (the parser and the command's function), to keep the suite fast."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DSH_HOME", raising=False)
    args = build_parser().parse_args(argv)
    assert args.func(args) == status
    assert message in capsys.readouterr().err


def test_cli_exit_status_1_when_the_workflow_fails(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text(FAILING)
    (tmp_path / "fail.toml").write_text('[[rules]]\nname = "boom"\nmatch = "BOOM"\nfail = "http-400"\n')
    done = subprocess.run([*CLI, "run", "r.py", "--json"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "failed"
    assert data["steps"]["boom"]["errors"][0]["type"] == "TurnFailedError"
    assert data["steps"]["after"]["status"] == "skipped"


def test_load_recipe_errors_and_inputs(tmp_path: Path) -> None:
    (tmp_path / "r.py").write_text("from dsh_orchestra.workflow import Workflow\nworkflow = Workflow('w')\nINPUTS = [1]\n")
    with pytest.raises(RecipeError, match="has no steps"):
        load_recipe(tmp_path / "r.py")
    assert parse_inputs(["n=3", "names=[\"a\"]", "text=hello world", "empty="]) == {
        "n": 3, "names": ["a"], "text": "hello world", "empty": "",
    }
