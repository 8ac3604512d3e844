"""Issue 25 item 8: ``batch`` and ``score`` print a table by default (scorer, mean, 95 % interval,
n, errors, n/a; usage, cost, time; the strict block and a one-line warning when an item ended in
error), and with ``--json`` exactly the JSON document they wrote to ``--summary``."""

from __future__ import annotations

import json
from pathlib import Path

from dsh_orchestra.cli._table import batch_table, score_table

from eval_support import result, run_cli, write_jsonl

SCENARIO = """default_reply = "I am not sure."
[[rules]]
name = "sum"
match = "20 + 22"
reply = "42"
[[rules]]
name = "flaky"
match = "FLAKY"
fail = "http-400"
"""
ITEMS = [
    {"id": "sum", "prompt": "What is 20 + 22?", "target": "42", "metadata": {"kind": "math"}},
    {"id": "cap", "prompt": "Capital of France?", "target": "Paris", "metadata": {"kind": "geo\u001b[31m"}},
    {"id": "flaky", "prompt": "FLAKY: what is 6 x 7?", "target": "42", "metadata": {"kind": "math"}},
]
PRICES = '["deepseek-official/deepseek-v4-flash"]\ninput_per_mtok = 0.5\noutput_per_mtok = 2.0\n'


def _batch(tmp_path: Path, *extra: str, dataset: list[dict[str, object]] = ITEMS) -> tuple[object, list[str]]:
    (tmp_path / "sc.toml").write_text(SCENARIO)
    (tmp_path / "prices.toml").write_text(PRICES)
    write_jsonl(tmp_path / "ds.jsonl", dataset)
    args = ["batch", "ds.jsonl", "--out", "r.jsonl", "--script", "sc.toml", "--score", "exact", "--score", "numeric",
            "--group-by", "kind", "--prices", "prices.toml", "--retries", "0", "--no-progress", *extra]
    return run_cli(args, cwd=tmp_path), args


def test_batch_prints_a_table_by_default_and_the_json_with_the_flag(tmp_path: Path) -> None:
    done, args = _batch(tmp_path, "--summary", "s.json")
    assert done.returncode == 1, done.stderr  # flaky ended in error
    lines = done.stdout.splitlines()
    assert lines[0] == "3 items: 2 ok, 1 error"
    header = lines.index("scorer    mean          95% CI  n  errors  n/a")
    exact, numeric = lines[header + 1].split(), lines[header + 2].split()
    assert exact == ["exact", "0.500", "[0.000,", "1.000]", "2", "1", "0"]  # sum right, cap wrong, flaky an error
    assert numeric == ["numeric", "1.000", "[1.000,", "1.000]", "1", "1", "1"]  # cap's target holds no number: n/a
    # the strict block: the one-line warning, then the means in which the error scores 0
    warning = lines.index("warning: 1 item ended in error (or its scorer failed) and is excluded from the means above; "
                          "strict means, in which an error scores 0:")
    assert lines[warning + 1].split() == ["scorer", "mean", "95%", "CI", "n"]
    assert lines[warning + 2].split()[:2] == ["exact", "0.333"] and lines[warning + 2].split()[-1] == "3"
    assert lines[warning + 3].split()[:2] == ["numeric", "0.500"] and lines[warning + 3].split()[-1] == "2"
    # groups: the group's control characters escaped, the columns still aligned
    by = lines.index("by kind:")
    assert "\x1b" not in done.stdout and any(line.startswith("geo\\x1b[31m  exact") for line in lines[by:])
    assert len({len(line) for line in lines[by + 1:by + 6] if line.split()[-1] != "n/a"}) <= 2
    summary = json.loads((tmp_path / "s.json").read_text())
    tokens = summary["usage"]
    assert (f"usage: {tokens['total_tokens']} tokens ({tokens['input_tokens']} input, {tokens['output_tokens']} output)"
            "   cost: ") in done.stdout and " USD" in done.stdout
    assert any(line.startswith("time: ") and "items/s, p50 " in line for line in lines)
    assert f"results: {tmp_path / 'r.jsonl'}" in lines

    # --json: the same document as --summary (only the times differ between two runs)
    (tmp_path / "r.jsonl").unlink()
    again = run_cli([*args, "--summary", "s2.json", "--json"], cwd=tmp_path)
    assert again.returncode == 1, again.stderr
    assert json.loads(again.stdout) == json.loads((tmp_path / "s2.json").read_text())


def test_no_strict_block_without_errors(tmp_path: Path) -> None:
    done, _ = _batch(tmp_path, dataset=ITEMS[:2])
    assert done.returncode == 0, done.stderr
    assert not any(line.startswith("warning") for line in done.stdout.splitlines())
    assert sum(line.startswith("scorer ") for line in done.stdout.splitlines()) == 1  # no strict block
    assert done.stdout.splitlines()[0] == "2 items: 2 ok, 0 error"


def test_score_prints_a_table_by_default_and_exits_1_on_error_lines(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "ds.jsonl", ITEMS)
    write_jsonl(tmp_path / "r.jsonl", [result("sum", "42"), result("cap", "Lyon"), result("flaky", None, status="error")])
    args = ["score", "r.jsonl", "--dataset", "ds.jsonl", "--score", "exact", "--out", "o.jsonl", "--summary", "s.json"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # flaky ended in error (docs/batch.md#exit-status)
    lines = done.stdout.splitlines()
    assert lines[0] == "3 result lines of 3 items: 2 ok, 1 error"
    assert lines[2:4] == ["scorer   mean          95% CI  n  errors  n/a", "exact   0.500  [0.000, 1.000]  2       1    0"]
    assert "warning: 1 item ended in error" in done.stdout and lines[-1].startswith("time: ")
    as_json = run_cli([*args, "--json"], cwd=tmp_path)
    assert as_json.returncode == 1 and json.loads(as_json.stdout) == json.loads((tmp_path / "s.json").read_text())
    write_jsonl(tmp_path / "r.jsonl", [result("sum", "42"), result("cap", "Lyon")])  # no error line: exit 0
    assert run_cli(args, cwd=tmp_path).returncode == 0


def test_the_table_of_a_stopped_run_with_clusters_judge_cost_and_many_groups() -> None:
    entry = {"mean": 0.25, "stderr": 0.1, "ci95": [0.05, 0.45], "n": 40, "n_error": 0, "n_na": 2,
             "strict": {"mean": 0.25, "stderr": 0.1, "ci95": [0.05, 0.45], "n": 40}, "n_clusters": 8, "design_effect": 1.5}
    doc = {
        "total": 80, "ok": 80, "error": 0, "resumed": 40, "duration_s": 12.5, "items_per_s": 3.2, "p50_s": 0.2,
        "p95_s": 0.9, "finish_reasons": {"completed": 80}, "approval_outcomes": {"rejected": 2}, "retries": 3,
        "processed": 40, "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        "scores": {"judge": entry}, "groups": {f"g{i}": {"judge": entry} for i in range(60)}, "cost_usd": 1.23456,
        "judge_usage": {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6}, "judge_cost_usd": 0.0000042,
        "stopped": "budget", "run": {"epochs": 2, "group_by": "topic"}, "results": "r\u0007.jsonl",
        "model": {"calls": 9, "cache_hits": 1, "by_route": {"x": 1}},
    }
    text = batch_table(doc)
    lines = text.splitlines()
    assert lines[0] == "80 results (2 epochs per item): 80 ok, 0 error (40 resumed, 3 retries)"
    assert lines[2].split() == ["scorer", "mean", "95%", "CI", "n", "errors", "n/a", "clusters", "design", "effect"]
    assert lines[3].split() == ["judge", "0.250", "[0.050,", "0.450]", "40", "0", "2", "8", "1.50"]
    assert "by topic:" in lines and "… 10 more groups (--json prints them all)" in lines
    assert "usage: 15 tokens (10 input, 5 output)   cost: 1.2346 USD" in lines
    assert "judge usage: 6 tokens (4 input, 2 output)   cost: 0.000004 USD" in lines
    assert "approvals: rejected 2" in lines and "model gateway: calls 9, cache_hits 1" in lines
    assert "stopped: a budget (--max-total-tokens/--max-total-cost) was reached; --resume continues" in lines
    assert lines[-1] == "results: r\\x07.jsonl"  # escaped, not rung
    scored = score_table({"results": 2, "items": 2, "ok": 2, "error": 0, "scores": {"exact": entry | {"mean": None, "ci95": None}},
                          "usage": doc["usage"], "agreement": {"exact": {"n": 2, "accuracy": 0.5, "kappa": None}},
                          "run": {"start_time": "2026-12-06T21:00:00.000Z", "end_time": "2026-12-06T21:00:01.500Z"}})
    assert scored.splitlines()[2:] == [
        "scorer  mean  95% CI   n  errors  n/a  clusters  design effect",
        "exact      —       —  40       0    2         8           1.50",
        "", "usage: 15 tokens (10 input, 5 output)", "time: 1.5 s", "",
        "agreement with the labels (--json for the confusion matrices):",
        "scorer  accuracy  kappa  n", "exact      0.500      —  2"]
