"""The evaluation recipes and ``batch`` scoring options through the CLI (real subprocesses)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eval_support import lines_of, run_cli, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
QA = ROOT / "recipes" / "eval_qa"
CODING = ROOT / "recipes" / "eval_coding"


def test_eval_qa_recipe(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    out, summary_file = tmp_path / "qa.jsonl", tmp_path / "qa-summary.json"
    common = ["--scoring", str(QA / "scoring.toml"), "--score", "exact", "--score", "includes", "--score", "numeric", "--group-by", "topic"]
    done = run_cli(["batch", str(QA / "dataset.jsonl"), "--out", str(out), "--script", str(QA / "scenario.toml"), "--dsh-home", str(home),
                    *common, "--epochs", "3", "--epoch-reducer", "pass@1", "--prices", str(QA / "prices.toml"),
                    "--summary", str(summary_file), "--no-progress", "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary == json.loads(summary_file.read_text())
    lines = lines_of(out)
    assert len(lines) == 24 and sorted({line["epoch"] for line in lines}) == [1, 2, 3]
    by = {(line["id"], line["epoch"]): line for line in lines}
    assert by[("geo-1", 2)]["scores"]["exact"]["value"] == 1.0
    assert by[("geo-3", 1)]["scores"]["exact"]["value"] == 0.0 and by[("geo-3", 1)]["scores"]["includes"]["value"] == 1.0
    assert by[("math-2", 3)]["scores"]["numeric"] == {"value": 1.0, "answer": "125,000", "explanation": None}
    assert by[("math-3", 1)]["scores"]["numeric"]["value"] == 1.0  # 1.41421 within 0.1 % (scoring.toml)
    assert summary["scores"]["exact"]["mean"] == pytest.approx(2 / 8)  # geo-1 "Paris" and geo-4 "pacific   ocean"
    assert summary["scores"]["includes"]["mean"] == pytest.approx(6 / 8)
    assert summary["scores"]["numeric"] == {**summary["scores"]["numeric"], "mean": 1.0, "n": 4, "n_error": 0, "n_na": 4}
    assert set(summary["groups"]) == {"arithmetic", "geography"}
    assert summary["usage"]["total_tokens"] == sum(line["usage"]["total_tokens"] for line in lines) > 0
    assert summary["cost_usd"] == pytest.approx(sum(line["cost_usd"] for line in lines))
    assert summary["run"]["epochs"] == 3 and summary["run"]["reducer"] == "pass@1"
    assert len(summary["run"]["scenario_sha256"]) == 64 and len(summary["run"]["scoring_sha256"]) == 64
    before = out.read_bytes()
    rescored = run_cli(["score", str(out), "--dataset", str(QA / "dataset.jsonl"), *common, "--epoch-reducer", "pass@3",
                        "--out", str(tmp_path / "qa-pass3.jsonl"), "--json"], cwd=tmp_path)
    assert rescored.returncode == 0, rescored.stderr
    pass3 = json.loads(rescored.stdout)
    assert pass3["scores"]["includes"]["mean"] == pytest.approx(6 / 8)  # deterministic simulator: pass@3 == pass@1
    assert pass3["run"]["reducer"] == "pass@3" and out.read_bytes() == before


def test_eval_coding_recipe_on_the_simulator(tmp_path: Path) -> None:
    recipe = tmp_path / "eval_coding"
    shutil.copytree(CODING, recipe)
    home = tmp_path / "home"
    home.mkdir()
    done = run_cli(["batch", "dataset.jsonl", "--out", "results.jsonl", "--script", "scenario.toml", "--dsh-home", str(home),
                    "--workspace-template", "template", "--score", "checks:tests_pass", "--keep-workspaces", "--no-progress", "--json"],
                   cwd=recipe)
    assert done.returncode == 0, done.stderr
    lines = {line["id"]: line for line in lines_of(recipe / "results.jsonl")}
    assert lines["fix-subtract"]["scores"]["checks:tests_pass"]["value"] == 0.0  # the simulator writes no file
    assert "FAILED" in lines["fix-subtract"]["scores"]["checks:tests_pass"]["answer"]
    assert lines["keep-add"]["scores"]["checks:tests_pass"] == {"value": 1.0, "answer": "OK", "explanation": "unittest test_calc.AddTest: exit 0"}
    for line in lines.values():
        assert Path(line["workspace"]).parent == recipe / "results.jsonl.workspaces"
    assert (recipe / "template" / "calc.py").read_text() == (CODING / "template" / "calc.py").read_text()
    assert json.loads(done.stdout)["scores"]["checks:tests_pass"]["mean"] == 0.5


def test_batch_budget_exit_4_then_resume_exit_0(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": f"q{i}", "prompt": "hello", "target": "x"} for i in range(8)])
    home = tmp_path / "home"
    home.mkdir()
    args = ["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--dsh-home", str(home), "--score", "exact",
            "--no-progress", "--concurrency", "1", "--json"]
    stopped = run_cli([*args, "--max-total-tokens", "20"], cwd=tmp_path)
    assert stopped.returncode == 4, stopped.stderr
    summary = json.loads(stopped.stdout)
    assert summary["stopped"] == "budget" and 0 < summary["processed"] < 8
    assert "budget is reached" in stopped.stderr
    resumed = run_cli([*args, "--resume"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(resumed.stdout)
    assert final["stopped"] is None and final["total"] == 8 and final["resumed"] == summary["processed"]
    assert sorted(line["id"] for line in lines_of(tmp_path / "r.jsonl")) == [f"q{i}" for i in range(8)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--score", "nope"], "is not a scorer"),
        (["--epochs", "0"], "epochs must be an integer >= 1"),
        (["--epochs", "2", "--epoch-reducer", "pass@3"], "k <= the epochs"),
        (["--max-total-cost", "1"], "--max-total-cost needs --prices"),
        (["--max-total-tokens", "-1"], "max-total-tokens must be an integer >= 0"),
        (["--seed", "-2"], "seed must be an integer >= 0"),
        (["--workspace-template", "absent"], "is not a directory"),
        (["--keep-workspaces"], "--keep-workspaces needs --workspace-template"),
        (["--scoring", "absent.toml"], "cannot read scoring file"),
    ],
)
def test_batch_bad_scoring_options_exit_2(tmp_path: Path, extra: list[str], message: str) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": "q", "prompt": "hello"}])
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--no-progress", *extra], cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.jsonl").exists()


def test_batch_epochs_with_a_dataset_session_id_exit_2(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": "q", "prompt": "hello", "session_id": "mine"}])
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "r.jsonl"), "--epochs", "2", "--no-progress"], cwd=tmp_path)
    assert done.returncode == 2 and "session_id" in done.stderr and "Traceback" not in done.stderr
