"""An exit status a script can loop on (issue 25): the one table of docs/batch.md, a runtime
that cannot start refused before the first item (2), budgets (4), a stop part-way (75),
--resume --retry-errors, and the documented unattended loop, run as written."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from dsh_orchestra.batch import BatchOptions, BatchUsageError
from dsh_orchestra.cli import main
from dsh_orchestra.protocol import OrchestraError

from batch_support import cli_args, items, write_dataset

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("runtime", "problem"), [
    (["--runtime-command", "/nonexistent/dsh --profile sdk"], "'/nonexistent/dsh' is not an executable file"),
    (["--runtime-command", "no-such-runtime-program-25 --profile sdk"], "program 'no-such-runtime-program-25' is not on PATH"),
])
def test_a_runtime_that_is_not_there_exits_2_before_the_first_item(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], runtime: list[str], problem: str) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", items(2))
    home = tmp_path / "home"
    home.mkdir()
    status = main(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), *runtime, "--dsh-home", str(home)])
    err = capsys.readouterr().err
    assert status == 2 and problem in err and "--runtime-command" in err
    assert not (tmp_path / "r.jsonl").exists()


def test_dsh_without_credentials_exits_2_before_the_first_item(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    dataset = write_dataset(tmp_path / "ds.jsonl", items(2))
    home = tmp_path / "home"
    home.mkdir()
    for command in (["batch", str(dataset), "--out", str(tmp_path / "r.jsonl")],
                    ["score", str(dataset), "--dataset", str(dataset), "--score", "judge", "--out", str(tmp_path / "o.jsonl")]):
        status = main([*command, "--runtime", "dsh", "--dsh-home", str(home)])
        err = capsys.readouterr().err
        assert status == 2 and "needs a credential: set DEEPSEEK_API_KEY" in err, err
    assert not (tmp_path / "r.jsonl").exists()


def test_a_stop_part_way_exits_75(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    async def gives_up(*args: object, **kwargs: object) -> None:
        raise ExceptionGroup("pool", [OrchestraError("every runtime kept failing to start")])

    monkeypatch.setattr("dsh_orchestra.cli._batch.run_batch", gives_up)
    dataset = write_dataset(tmp_path / "ds.jsonl", items(2))
    assert main(cli_args(dataset, tmp_path / "r.jsonl", tmp_path, "--no-progress")) == 75
    assert "run again with --resume" in capsys.readouterr().err


def test_retry_errors_needs_resume() -> None:
    with pytest.raises(BatchUsageError, match="retry_errors=True needs resume=True"):
        BatchOptions(retry_errors=True)


def test_resume_retry_errors_runs_the_error_lines_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dataset = write_dataset(tmp_path / "ds.jsonl", [*items(3), {"id": "bad", "prompt": "E400"}])
    out = tmp_path / "r.jsonl"
    assert main(cli_args(dataset, out, tmp_path, "--no-progress", "--retries", "0")) == 1
    before = {line["id"]: line for line in map(orjson.loads, out.read_bytes().splitlines())}
    assert before["bad"]["status"] == "error"
    capsys.readouterr()
    assert main(cli_args(dataset, out, tmp_path, "--no-progress", "--retries", "0", "--resume", "--retry-errors",
                         "--json")) == 1
    captured = capsys.readouterr()
    after = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert sorted(line["id"] for line in after) == sorted(before)  # one line per id
    again = {line["id"]: line for line in after}
    assert again["bad"]["session_id"] != before["bad"]["session_id"]  # it ran again
    assert all(again[i] == before[i] for i in before if i != "bad")  # the ok lines kept as they were
    assert '"resumed": 3' in captured.out
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def _loop_block() -> str:
    text = (ROOT / "docs" / "batch.md").read_text()
    blocks = re.findall(r"```sh\n(while :; do\n.*?)```", text, re.DOTALL)
    assert len(blocks) == 1, "docs/batch.md has one unattended loop"
    return blocks[0]


@pytest.mark.parametrize("prompts", [None, [{"id": "ok", "prompt": "hi"}, {"id": "bad", "prompt": "E400"}]])
def test_the_documented_unattended_loop_ends(tmp_path: Path, prompts: list[dict[str, str]] | None) -> None:
    """The loop of docs/batch.md, run by sh as written from a copy of the repository: it ends
    when all is done, and when an item ended in error (status 1 is final)."""
    shutil.copytree(ROOT / "recipes", tmp_path / "recipes", ignore=shutil.ignore_patterns("__pycache__", "out"))
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    if prompts is not None:  # an item that ends in error: the batch's scenario fails it (a shim adds --script)
        write_dataset(tmp_path / "recipes" / "quickstart" / "prompts.jsonl", prompts)
        (tmp_path / "fail.toml").write_text('[[rules]]\nname = "bad"\nmatch = "E400"\nfail = "http-400"\n')
        shim = tmp_path / "bin" / "dsh-orchestra"
        shim.parent.mkdir()
        real = Path(sys.executable).parent / "dsh-orchestra"
        shim.write_text(f'#!/bin/sh\nexec "{real}" "$@" --script "{tmp_path / "fail.toml"}" --retries 0\n')
        shim.chmod(0o755)
        path = f"{shim.parent}{os.pathsep}{path}"
    env = {**os.environ, "DSH_TELEMETRY_MODE": "DISABLED", "PATH": path}
    done = subprocess.run(["sh", "-c", _loop_block()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    expected = 0 if prompts is None else 1
    assert done.stdout.strip().endswith(f"batch finished with exit status {expected}"), done.stdout[-500:]
    assert (tmp_path / "results.jsonl").is_file()
