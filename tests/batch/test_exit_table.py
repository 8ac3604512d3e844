"""The exit-status table of docs/batch.md#exit-status, row by row, for the rows that
tests/batch/test_exit_statuses.py, tests/eval/test_summary_table.py and the workflow tests do
not already cover: ``score`` 0/1, ``compare`` 0 with an errored item, ``run`` 2 and 75, and
Ctrl-C (130) and SIGTERM (143) for ``batch``, ``run``, ``score`` and ``compare`` (real
processes, stopped while they work)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dsh_orchestra.cli import main
from dsh_orchestra.protocol import OrchestraError

from batch_support import write_dataset

CLI = [sys.executable, "-c", "import sys; from dsh_orchestra.cli import main; sys.exit(main())"]

SLOW_SCORER = '''
import os, pathlib, time

def score(item, result):
    pathlib.Path(os.environ["MARKER"]).write_text("scoring")
    time.sleep(120)
    return 1.0
'''
SLOW_RECIPE = '''
import os, pathlib

import trio

from dsh_orchestra.workflow import StepContext, Workflow

workflow = Workflow("slow")


@workflow.step()
async def wait(ctx: StepContext) -> str:
    pathlib.Path(os.environ["MARKER"]).write_text("waiting")
    await trio.sleep(120)
    return "done"
'''
SLOW_SCENARIO = '[[rules]]\nname = "slow"\nmatch = "SLOW"\nreply = "late"\ndelay = 120\n'


def _line(item_id: str, status: str = "ok", response: str | None = "x") -> dict[str, object]:
    return {"id": item_id, "status": status, "final_response": response if status == "ok" else None,
            "error": None if status == "ok" else {"type": "TurnFailed", "message": "x"}}


def _files(tmp_path: Path) -> None:
    write_dataset(tmp_path / "ds.jsonl", [{"id": "a", "prompt": "SLOW a", "target": "x"},
                                          {"id": "b", "prompt": "SLOW b", "target": "x"}])
    write_dataset(tmp_path / "r.jsonl", [_line("a"), _line("b")])
    (tmp_path / "slow.py").write_text(SLOW_SCORER)
    (tmp_path / "recipe.py").write_text(SLOW_RECIPE)
    (tmp_path / "slow.toml").write_text(SLOW_SCENARIO)


COMMANDS = {
    "batch": ["batch", "ds.jsonl", "--out", "out.jsonl", "--script", "slow.toml", "--no-progress"],
    "run": ["run", "recipe.py", "--no-progress"],
    "score": ["score", "r.jsonl", "--dataset", "ds.jsonl", "--score", "slow:score", "--scorer-timeout", "300", "--out", "out.jsonl"],
    "compare": ["compare", "r.jsonl", "r.jsonl", "--dataset", "ds.jsonl", "--score", "slow:score", "--json"],
}


@pytest.mark.parametrize(("command", "signum", "status"), [
    (command, signum, status) for command in COMMANDS for signum, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143))
    if (command, signum) != ("batch", signal.SIGTERM)  # tests/batch/test_contain_workspaces.py
])
def test_interrupted_130_and_terminated_143(tmp_path: Path, command: str, signum: int, status: int) -> None:
    """Stopped while it works: the status, the one line saying so, no traceback, no output file
    half-written, no process left behind."""
    returncode, stderr = _stopped_while_it_works(tmp_path, command, signum)
    assert returncode == status, stderr
    said = "interrupted" if signum == signal.SIGINT else "terminated"
    assert f"dsh-orchestra: {said}" in stderr and "Traceback" not in stderr, stderr
    assert not (tmp_path / "out.jsonl").exists() or command == "batch", "score writes RESCORED only when it finished"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.jsonl")], "no temporary file left"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_sigterm_stops_a_background_job_started_with_sigint_ignored(tmp_path: Path, command: str) -> None:
    """A shell script's `cmd &` starts it with SIGINT ignored: SIGTERM must still stop it (143)."""
    returncode, stderr = _stopped_while_it_works(tmp_path, command, signal.SIGTERM, sigint_ignored=True)
    assert returncode == 143, stderr
    assert "dsh-orchestra: terminated" in stderr and "Traceback" not in stderr, stderr


def _stopped_while_it_works(tmp_path: Path, command: str, signum: int, *, sigint_ignored: bool = False) -> tuple[int, str]:
    """Start ``command`` on the slow files, send ``signum`` once its work is under way, and
    return its exit status and stderr; no process of it may be left behind."""
    _files(tmp_path)
    marker = tmp_path / "marker"
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "MARKER": str(marker), "PYTHONPATH": str(tmp_path)}
    ignore = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored else None
    process = subprocess.Popen([*CLI, *COMMANDS[command]], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=ignore)  # noqa: PLW1509 - no threads yet
    try:
        deadline = time.monotonic() + 90
        # the work is under way: the scorer or step wrote its marker, or the batch's items are in flight
        while not (marker.exists() or (command == "batch" and _sessions_started(tmp_path))):
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)  # polling another process: no event to wait on
        children = psutil.Process(process.pid).children(recursive=True)  # scorer workers, runtimes
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"processes left behind: {alive}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, stderr


def _sessions_started(tmp_path: Path) -> bool:
    """True once the batch's runtime has started (its results lock is taken)."""
    return any(p.name.startswith("out.jsonl") for p in tmp_path.iterdir())


def test_score_exits_0_on_results_without_error_lines_and_1_with_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _files(tmp_path)
    args = ["score", str(tmp_path / "r.jsonl"), "--dataset", str(tmp_path / "ds.jsonl"), "--score", "exact",
            "--out", str(tmp_path / "o.jsonl")]
    assert main(args) == 0
    write_dataset(tmp_path / "r.jsonl", [_line("a"), _line("b", "error")])
    assert main(args) == 1
    assert "warning: 1 item ended in error" in capsys.readouterr().out


def test_compare_exits_0_when_a_run_has_an_errored_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """compare's 1 is "—" in the table: items that ended in error are in the strict view."""
    scores = {"scores": {"exact": {"value": 1.0, "answer": None, "explanation": None}}}
    base = write_dataset(tmp_path / "base.jsonl", [_line("a") | scores, _line("b", "error")])
    cand = write_dataset(tmp_path / "cand.jsonl", [_line("a") | scores, _line("b") | scores])
    assert main(["compare", str(base), str(cand)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("exact: candidate +0.000") and "strict (an error scores 0) +0.500, 0 regressions, 1 improvements" in out


def test_run_exits_2_when_its_runtime_cannot_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _files(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    status = main(["run", str(tmp_path / "recipe.py"), "--runtime-command", "no-such-runtime-program-25", "--dsh-home", str(home)])
    err = capsys.readouterr().err
    assert status == 2 and "program 'no-such-runtime-program-25' is not on PATH" in err and "Traceback" not in err


def test_run_exits_75_when_it_could_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    async def gives_up(*args: object, **kwargs: object) -> None:
        raise ExceptionGroup("run", [OrchestraError("every runtime kept failing")])

    _files(tmp_path)
    monkeypatch.setattr("dsh_orchestra.cli._run._run", gives_up)
    assert main(["run", str(tmp_path / "recipe.py"), "--no-progress"]) == 75
    assert "the workflow could not run: every runtime kept failing" in capsys.readouterr().err
