"""``dsh-orchestra score``: re-scoring finished results; RESULTS is never modified; exit 0, 1 (a line
of RESULTS ended in error, as the ``files`` fixture's q3) or 2."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from dsh_orchestra.eval import pass_at_k

from eval_support import lines_of, result, run_cli, write_jsonl

DATASET = [
    {"id": "q1", "prompt": "Capital of France?", "target": "Paris", "metadata": {"level": "easy"}},
    {"id": "q2", "prompt": "6 x 7?", "target": ["42", "forty-two"], "metadata": {"level": "hard"}},
    {"id": "q3", "prompt": "Pick", "target": "B", "choices": ["x", "y", "z"], "metadata": {"level": "hard"}},
]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    dataset = write_jsonl(tmp_path / "ds.jsonl", DATASET)
    results = write_jsonl(tmp_path / "results.jsonl", [
        result("q1", "paris", usage={"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}),
        result("q2", "It is 42.", usage={"input_tokens": 200, "output_tokens": 20, "total_tokens": 220}),
        result("q3", None, status="error", usage={"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}),
    ])
    return dataset, results


def test_score_writes_rescored_and_never_touches_results(tmp_path: Path, files: tuple[Path, Path]) -> None:
    dataset, results = files
    before, stat = results.read_bytes(), results.stat()
    out, summary_file = tmp_path / "rescored.jsonl", tmp_path / "summary.json"
    done = run_cli(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--score", "numeric",
                    "--group-by", "level", "--out", str(out), "--summary", str(summary_file), "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # q3 ended in error (docs/batch.md#exit-status)
    assert results.read_bytes() == before and results.stat().st_mtime_ns == stat.st_mtime_ns
    lines = {line["id"]: line for line in lines_of(out)}
    assert lines["q1"]["scores"] == {"exact": {"value": 1.0, "answer": None, "explanation": None},
                                     "numeric": {"value": None, "answer": None, "explanation": "target 'Paris' holds no number"}}
    assert lines["q2"]["scores"]["numeric"] == {"value": 1.0, "answer": "42", "explanation": None}
    assert lines["q3"]["scores"] == {"exact": {"value": None, "answer": None, "explanation": "the item ended in error", "error": True},
                                     "numeric": {"value": None, "answer": None, "explanation": "the item ended in error", "error": True}}
    summary = json.loads(done.stdout)
    assert summary == json.loads(summary_file.read_text())
    assert summary["scores"]["exact"]["mean"] == 0.5 and summary["scores"]["exact"]["n"] == 2
    assert summary["scores"]["exact"]["n_error"] == 1 and summary["scores"]["numeric"]["n_error"] == 1
    assert summary["scores"]["numeric"]["n_na"] == 1  # q1's target holds no number: not an error
    assert summary["scores"]["exact"]["strict"]["mean"] == pytest.approx(1 / 3)  # q3's error scores 0 there
    assert summary["scores"]["exact"]["stderr"] == pytest.approx(math.sqrt(0.5) / math.sqrt(2))
    assert summary["groups"]["hard"]["exact"] == {
        "mean": 0.0, "stderr": None, "ci95": [0.0, 0.0], "n": 1, "n_error": 1, "n_na": 0,
        "strict": {"mean": 0.0, "stderr": 0.0, "ci95": [0.0, 0.0], "n": 2}}
    assert summary["usage"] == {"input_tokens": 300, "output_tokens": 30, "total_tokens": 330}
    assert summary["run"]["dataset"]["items"] == 3 and len(summary["run"]["dataset"]["sha256"]) == 64
    assert summary["run"]["scorers"] == ["exact", "numeric"] and summary["run"]["seed"] == 0
    assert "cost_usd" not in summary


def test_score_with_prices_and_epochs_pass_at_k(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", DATASET[:2])
    usage = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100}
    rows = [result("q1", r, epoch=e, usage=usage) for e, r in enumerate(["Paris", "Lyon", "Nice"], start=1)]
    rows += [result("q2", r, epoch=e, usage=usage) for e, r in enumerate(["41", "42", "42"], start=1)]
    results = write_jsonl(tmp_path / "results.jsonl", rows)
    prices = tmp_path / "prices.toml"
    prices.write_text('["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 0.5\noutput_per_mtok = 2.0\n')
    out = tmp_path / "rescored.jsonl"
    common = ["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(out), "--prices", str(prices)]
    for reducer, expected in [("pass@1", (1 / 3 + 2 / 3) / 2), ("pass@3", 1.0), ("pass@2", (pass_at_k(3, 1, 2) + pass_at_k(3, 2, 2)) / 2), ("max", 1.0), ("min", 0.0)]:
        done = run_cli([*common, "--epoch-reducer", reducer, "--json"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["scores"]["exact"]["mean"] == pytest.approx(expected), reducer
        assert summary["scores"]["exact"]["n"] == 2
    line_cost = (1000 * 0.5 + 100 * 2.0) / 1e6
    assert all(line["cost_usd"] == pytest.approx(line_cost) for line in lines_of(out))
    assert [line["epoch"] for line in lines_of(out)] == [1, 2, 3, 1, 2, 3]
    assert summary["cost_usd"] == pytest.approx(6 * line_cost)
    assert summary["run"]["epochs"] == 3
    too_far = run_cli([*common, "--epoch-reducer", "pass@4"], cwd=tmp_path)
    assert too_far.returncode == 2 and "k <= the epochs in RESULTS (3)" in too_far.stderr


def test_the_same_results_give_the_same_interval(tmp_path: Path) -> None:
    dataset = write_jsonl(tmp_path / "ds.jsonl", [{"id": f"q{i}", "prompt": "p", "target": "yes"} for i in range(40)])
    results = write_jsonl(tmp_path / "r.jsonl", [result(f"q{i}", "yes" if i % 3 else "no") for i in range(40)])
    intervals = []
    for seed in ("0", "0", "7"):
        done = run_cli(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--seed", seed,
                        "--out", str(tmp_path / "o.jsonl"), "--json"], cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        intervals.append(json.loads(done.stdout)["scores"]["exact"]["ci95"])
    assert intervals[0] == intervals[1]
    low, high = intervals[0]
    assert low < 27 / 40 < high


def test_python_and_regex_scorers_from_the_working_directory(tmp_path: Path, files: tuple[Path, Path]) -> None:
    dataset, results = files
    (tmp_path / "myscorers.py").write_text(
        "from dsh_orchestra.eval import Score\n"
        "def length(item, result):\n    return Score(len(result.final_response), answer=item.id)\n"
        "async def level(item, result):\n    return item.metadata['level'] == 'easy'\n"
    )
    scoring = tmp_path / "scoring.toml"
    scoring.write_text('[regex.digits]\npattern = "[0-9]+"\n\n[scorers.easy]\nkind = "python"\nfunction = "myscorers:level"\n')
    out = tmp_path / "o.jsonl"
    done = run_cli(["score", str(results), "--dataset", str(dataset), "--scoring", str(scoring), "--score", "myscorers:length",
                    "--score", "regex:digits", "--score", "easy", "--out", str(out), "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # q3 ended in error
    lines = {line["id"]: line for line in lines_of(out)}
    assert lines["q2"]["scores"]["myscorers:length"] == {"value": 9.0, "answer": "q2", "explanation": None}
    assert lines["q2"]["scores"]["regex:digits"] == {"value": 1.0, "answer": "42", "explanation": None}
    assert lines["q1"]["scores"]["easy"]["value"] == 1.0 and lines["q2"]["scores"]["easy"]["value"] == 0.0
    assert json.loads(done.stdout)["run"]["scoring_sha256"] is not None


def test_judge_on_the_simulator(tmp_path: Path, files: tuple[Path, Path]) -> None:
    dataset, results = files
    script = tmp_path / "judge.toml"
    script.write_text(
        'default_reply = \'{"grade": "incorrect", "explanation": "no"}\'\n\n[[rules]]\nname = "paris"\n'
        'regex = "\\\\[Response\\\\]\\\\n<<<RESPONSE-[0-9a-f]+>>>\\\\nparis"\nreply = \'{"grade": "correct", "explanation": "yes"}\'\n'
    )
    scoring = tmp_path / "scoring.toml"
    scoring.write_text(f'[judge]\nruntime = "sim"\nscript = "{script}"\n')
    out = tmp_path / "o.jsonl"
    done = run_cli(["score", str(results), "--dataset", str(dataset), "--scoring", str(scoring), "--score", "judge", "--out", str(out), "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # q3 ended in error
    lines = {line["id"]: line for line in lines_of(out)}
    assert lines["q1"]["scores"]["judge"] == {"value": 1.0, "answer": "correct", "explanation": "yes"}
    assert lines["q2"]["scores"]["judge"]["value"] == 0.0
    assert lines["q1"]["judge_usage"]["total_tokens"] > 0
    summary = json.loads(done.stdout)
    assert summary["judge_usage"]["total_tokens"] > 0 and summary["usage"]["total_tokens"] == 330


def test_a_rescored_file_can_be_rescored(tmp_path: Path, files: tuple[Path, Path]) -> None:
    dataset, results = files
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert run_cli(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(first)], cwd=tmp_path).returncode == 1
    done = run_cli(["score", str(first), "--dataset", str(dataset), "--score", "includes", "--out", str(second)], cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # q3 ended in error, in both
    assert all(set(line["scores"]) == {"includes"} for line in lines_of(second))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--score", "nope"], "is not a scorer"),
        (["--score", "regex:x"], "no pattern named 'x'"),
        (["--score", "nomodule_abc:f"], "cannot import module"),
        (["--score", "exact", "--epoch-reducer", "median"], "--epoch-reducer must be"),
        (["--score", "exact", "--seed", "-1"], "seed must be an integer >= 0"),
        (["--score", "exact", "--scoring", "absent.toml"], "cannot read scoring file"),
        (["--score", "exact", "--prices", "absent.toml"], "cannot read prices file"),
        ([], "give at least one --score"),
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, files: tuple[Path, Path], extra: list[str], message: str) -> None:
    dataset, results = files
    done = run_cli(["score", str(results), "--dataset", str(dataset), "--out", str(tmp_path / "o.jsonl"), *extra], cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "o.jsonl").exists()


def test_bad_inputs_exit_2_and_write_nothing(tmp_path: Path, files: tuple[Path, Path]) -> None:
    dataset, results = files
    out = tmp_path / "o.jsonl"
    cases = [
        ([str(results), "--dataset", str(dataset), "--out", str(results)], "are the same file"),
        ([str(results), "--dataset", str(dataset), "--out", str(dataset)], "are the same file"),  # checked like batch's
        ([str(results), "--dataset", str(dataset), "--out", str(out), "--summary", str(out)], "are the same file"),
        ([str(tmp_path / "none.jsonl"), "--dataset", str(dataset), "--out", str(out)], "does not exist"),
        ([str(results), "--dataset", str(tmp_path / "none.jsonl"), "--out", str(out)], "none.jsonl"),
        ([str(results), "--dataset", str(dataset), "--out", str(tmp_path / "missing" / "o.jsonl")], "does not exist; create it first"),
    ]
    other = write_jsonl(tmp_path / "other.jsonl", [{"id": "zz", "prompt": "p", "target": "x"}])
    cases.append(([str(results), "--dataset", str(other), "--out", str(out)], "is not in the dataset"))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": "q1"}\nnot json\n{"id": "q2"}\n')
    cases.append(([str(broken), "--dataset", str(dataset), "--out", str(out)], "line 2 is not valid JSON"))
    prices = tmp_path / "prices.toml"
    prices.write_text('["other/model"]\ninput_per_mtok = 1\noutput_per_mtok = 1\n')
    cases.append(([str(results), "--dataset", str(dataset), "--out", str(out), "--prices", str(prices)], "no table for route 'deepseek-official/deepseek-v4-flash'"))
    before, dataset_before = results.read_bytes(), dataset.read_bytes()
    for args, message in cases:
        done = run_cli(["score", *args, "--score", "exact"], cwd=tmp_path)
        assert done.returncode == 2 and message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr
    assert results.read_bytes() == before and dataset.read_bytes() == dataset_before and not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left


def test_a_torn_last_line_is_skipped(tmp_path: Path, files: tuple[Path, Path]) -> None:
    dataset, results = files
    with open(results, "ab") as handle:
        handle.write(b'{"id": "q1", "sta')
    before = results.read_bytes()
    out = tmp_path / "o.jsonl"
    done = run_cli(["score", str(results), "--dataset", str(dataset), "--score", "exact", "--out", str(out)], cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # q3 ended in error
    assert len(lines_of(out)) == 3 and results.read_bytes() == before
    assert os.path.getsize(results) == len(before)
