"""Scorers that fail are loud (issue 25): the warnings give each scorer's failure count and its
first error; a scorer with no value on any item that ran makes batch and score exit 1."""

from __future__ import annotations

import json
from pathlib import Path

from eval_support import lines_of, run_cli, write_jsonl

SCORERS = '''
def boom(item, result):
    raise RuntimeError(f"cannot score {item.id}")

def picky(item, result):
    if item.id == "b":
        raise ValueError("b is odd")
    return 1.0
'''

JUDGE_SCENARIO = '''default_reply = "no verdict here, just words"
'''


def _setup(tmp_path: Path) -> Path:
    (tmp_path / "loud_scorers.py").write_text(SCORERS)
    return write_jsonl(tmp_path / "ds.jsonl", [{"id": i, "prompt": f"say {i}", "target": i} for i in "abc"])


def test_a_scorer_failing_on_every_item_exits_1_and_says_why(tmp_path: Path) -> None:
    dataset = _setup(tmp_path)
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--score", "exact",
                    "--score", "loud_scorers:boom", "--no-progress", "--json"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["error"] == 0 and summary["scorers_without_value"] == ["loud_scorers:boom"]
    warning = "scorer 'loud_scorers:boom' failed 3 times on items that ran; the first error: RuntimeError: cannot score "
    assert any(w.startswith(warning) for w in summary["warnings"])
    assert "dsh-orchestra: warning: " + warning in done.stderr
    assert "scorer 'loud_scorers:boom' produced no value on any item that ran" in done.stderr
    boom = summary["scores"]["loud_scorers:boom"]
    assert (boom["n"], boom["n_error"], boom["n_na"]) == (0, 3, 0)
    done = run_cli(["score", str(tmp_path / "r.jsonl"), "--dataset", str(dataset), "--score", "loud_scorers:boom",
                    "--out", str(tmp_path / "o.jsonl")], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 1 and "produced no value on any item that ran" in done.stderr


def test_a_scorer_failing_on_some_items_warns_with_exit_0(tmp_path: Path) -> None:
    dataset = _setup(tmp_path)
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--score", "loud_scorers:picky",
                    "--no-progress", "--json"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert "scorer 'loud_scorers:picky' failed 1 time on items that ran; the first error: ValueError: b is odd" in summary["warnings"]
    assert summary["scorers_without_value"] == []
    picky = summary["scores"]["loud_scorers:picky"]
    assert (picky["n"], picky["n_error"], picky["strict"]["mean"]) == (2, 1, 2 / 3)
    assert "loud_scorers:picky: 1 item excluded from the mean" in done.stderr


def test_a_judge_that_never_gives_a_verdict_exits_1(tmp_path: Path) -> None:
    dataset = _setup(tmp_path)
    (tmp_path / "judge.toml").write_text(JUDGE_SCENARIO)
    (tmp_path / "scoring.toml").write_text('[judge]\nruntime = "sim"\nscript = "judge.toml"\nparse_attempts = 0\n')
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--scoring", str(tmp_path / "scoring.toml"),
                    "--score", "judge", "--no-progress", "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    assert summary["scorers_without_value"] == ["judge"]
    assert any(w.startswith("scorer 'judge' failed 3 times on items that ran; the first error: ") for w in summary["warnings"])
    assert all(line["scores"]["judge"]["error"] is True for line in lines_of(tmp_path / "r.jsonl"))
