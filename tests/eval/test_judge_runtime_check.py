"""Issue 25 item 6: a judge's own ``[judge] runtime`` in the scoring file is checked before the
first item, as ``--runtime`` is: a program that is not there, or ``dsh`` on deepseek-official
without ``DEEPSEEK_API_KEY``, exits 2 naming the judge, its runtime and the scoring file;
nothing runs and nothing is written (batch, score and compare)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dsh_orchestra.cli import main

from eval_support import result, write_jsonl

CASES = [
    ('runtime = "/nonexistent/judge-25 --profile sdk"', "'/nonexistent/judge-25' is not an executable file"),
    ('runtime = "no-such-judge-program-25"', "program 'no-such-judge-program-25' is not on PATH"),
    ('runtime = "dsh"\nprovider = "deepseek-official"', "needs a credential: set DEEPSEEK_API_KEY"),
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": "q1", "prompt": "Capital of France?", "target": "Paris"}])
    results = write_jsonl(tmp_path / "r.jsonl", [result("q1", "Paris")])
    return dataset, results


@pytest.mark.parametrize(("runtime", "problem"), CASES)
def test_a_judge_runtime_that_cannot_start_exits_2_before_the_first_item(
        tmp_path: Path, files: tuple[Path, Path], runtime: str, problem: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    dataset, results = files
    scoring = tmp_path / "scoring.toml"
    scoring.write_text(f"[judge]\n{runtime}\n")
    out = tmp_path / "out.jsonl"
    commands = {
        "batch": ["batch", str(dataset), "--out", str(out), "--score", "judge", "--scoring", str(scoring), "--no-progress"],
        "score": ["score", str(results), "--dataset", str(dataset), "--score", "judge", "--scoring", str(scoring), "--out", str(out)],
        "compare": ["compare", str(results), str(results), "--dataset", str(dataset), "--score", "judge", "--scoring", str(scoring)],
    }
    for name, command in commands.items():
        status = main(command)
        captured = capsys.readouterr()
        assert status == 2, (name, captured.err)
        assert problem in captured.err and "judge 'judge': [judge] runtime = " in captured.err, (name, captured.err)
        assert f"--scoring {scoring}" in captured.err and "Traceback" not in captured.err, (name, captured.err)
        assert not out.exists() and captured.out == "", name


def test_a_named_judge_scorer_is_checked_too(tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dataset, _ = files
    scoring = tmp_path / "scoring.toml"
    scoring.write_text('[scorers.strict]\nkind = "judge"\nruntime = "no-such-judge-program-25"\n')
    status = main(["batch", str(dataset), "--out", str(tmp_path / "out.jsonl"), "--scoring", str(scoring), "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and "judge 'strict': [judge] runtime = 'no-such-judge-program-25'" in err and "not on PATH" in err


def test_a_judge_runtime_that_can_start_runs(tmp_path: Path, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``runtime = "sim"`` passes the check; the judge grades on the simulator."""
    dataset, results = files
    (tmp_path / "judge.toml").write_text("default_reply = '{\"grade\": \"correct\", \"explanation\": \"yes\"}'\n")
    scoring = tmp_path / "scoring.toml"
    scoring.write_text(f'[judge]\nruntime = "sim"\nscript = "{tmp_path / "judge.toml"}"\n')
    status = main(["score", str(results), "--dataset", str(dataset), "--score", "judge", "--scoring", str(scoring),
                   "--out", str(tmp_path / "out.jsonl"), "--json"])
    captured = capsys.readouterr()
    assert status == 0 and "[judge] runtime" not in captured.err, captured.err
    assert json.loads((tmp_path / "out.jsonl").read_text())["scores"]["judge"]["value"] == 1.0
