"""The newcomer's path of issue 25, end to end on the simulator: a dataset with choices, a
typo'd key, an item that ends in error; batch, score, compare and report. Every number the
user reads is honest: the typo stops the run, the model sees the choices, the error counts."""

from __future__ import annotations

import json
from pathlib import Path

from eval_support import lines_of, run_cli, write_jsonl

ITEMS = [
    {"id": "cap", "prompt": "What is the capital of Australia?", "choices": ["Sydney", "Canberra", "Melbourne"], "target": "B"},
    {"id": "sum", "prompt": "What is 20 + 22?", "target": "42"},
    {"id": "flaky", "prompt": "FLAKY question: what is 6 x 7?", "target": "42"},
]
BASE = """default_reply = "I am not sure."
[[rules]]
name = "mc"
match = "B) Canberra"
reply = "Thinking it over. ANSWER: B"
[[rules]]
name = "sum"
match = "20 + 22"
reply = "It is \\u221242? No: 42."
[[rules]]
name = "flaky"
match = "FLAKY"
fail = "http-400"
"""
CANDIDATE = BASE.replace('fail = "http-400"', 'reply = "42"')


def test_the_newcomer_path(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "cand.toml").write_text(CANDIDATE)
    typo = write_jsonl(tmp_path / "typo.jsonl", [{k: v for k, v in ITEMS[0].items() if k != "target"} | {"traget": "B"}, *ITEMS[1:]])
    scorers = ["--score", "choice", "--score", "numeric", "--score", "exact"]

    # 1. a typo'd key: exit 2, by file and line, with what to fix; nothing runs
    done = run_cli(["batch", str(typo), "--out", str(tmp_path / "a.jsonl"), "--script", str(tmp_path / "base.toml"), *scorers,
                    "--no-progress"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"{typo}:" in done.stderr and "line 1: item 'cap': unknown key 'traget': did you mean `target`?" in done.stderr
    assert not (tmp_path / "a.jsonl").exists()

    # 2. fixed: the base run; one item ends in error (exit 1), the scores say so
    dataset = write_jsonl(tmp_path / "ds.jsonl", ITEMS)
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "a.jsonl"), "--script", str(tmp_path / "base.toml"), *scorers,
                    "--retries", "0", "--no-progress", "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    summary = json.loads(done.stdout)
    lines = {line["id"]: line for line in lines_of(tmp_path / "a.jsonl")}
    assert lines["cap"]["scores"]["choice"] == {"value": 1.0, "answer": "B", "explanation": None}  # the model saw the options
    assert lines["sum"]["scores"]["numeric"]["value"] == 1.0 and lines["flaky"]["status"] == "error"
    choice, numeric = summary["scores"]["choice"], summary["scores"]["numeric"]
    assert (choice["n"], choice["n_error"], choice["n_na"]) == (1, 1, 1)  # sum's target names no choice: n/a
    assert (numeric["n"], numeric["n_error"], numeric["n_na"]) == (1, 1, 1)  # cap's target holds no number: n/a
    assert numeric["mean"] == 1.0 and numeric["strict"]["mean"] == 0.5 and numeric["strict"]["n"] == 2
    assert "numeric: 1 item excluded from the mean" in done.stderr
    assert summary["run"]["prompt_template"].startswith("Answer the following multiple choice question.")

    # 3. the candidate: every item ok (exit 0); the terminal shows a table by default
    done = run_cli(["batch", str(dataset), "--out", str(tmp_path / "b.jsonl"), "--script", str(tmp_path / "cand.toml"), *scorers,
                    "--no-progress"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    table = done.stdout.splitlines()
    assert table[0] == "3 items: 3 ok, 0 error" and table[2].split() == ["scorer", "mean", "95%", "CI", "n", "errors", "n/a"]
    assert table[4].split()[:2] == ["numeric", "1.000"] and table[4].split()[-2:] == ["0", "1"]  # no error, cap n/a

    # 4. score the base again (what `score` is for): the same counts; its error line: exit 1
    done = run_cli(["score", str(tmp_path / "a.jsonl"), "--dataset", str(dataset), *scorers, "--out", str(tmp_path / "a2.jsonl"),
                    "--json"], cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    rescored = json.loads(done.stdout)
    assert rescored["scores"]["numeric"] == summary["scores"]["numeric"]
    assert "numeric: 1 item excluded from the mean" in done.stderr

    # 5. compare: by the scored items the fix is invisible; the strict view shows it
    done = run_cli(["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    numeric = json.loads(done.stdout)["scorers"]["numeric"]
    assert numeric["n"] == 1 and numeric["diff"] == 0.0 and numeric["improvements"] == []
    assert numeric["strict"]["n"] == 2 and numeric["strict"]["improvements"] == ["flaky"]
    assert numeric["strict"]["diff"] == 0.5

    # 6. the report shows the errors and the strict means
    done = run_cli(["report", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "a.html")], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "a.html").read_text()
    assert 'id="errors-warning"' in html and "numeric: 1 item excluded from the mean" in html and "strict mean" in html
