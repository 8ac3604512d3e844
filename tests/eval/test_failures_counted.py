"""Failures are not scores: ``n`` / ``n_error`` / ``n_na`` per scorer and group, and the
``strict`` block in which an item that ended in error (or whose scorer failed) scores 0."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest
import trio

from dsh_orchestra.eval import EvalItem, EvalResult, ScoreTally, bind_scorers, make_plan, metrics, score_attempt
from dsh_orchestra.eval._compare import compare_runs

from eval_support import run_cli


def _line(item_id: str, status: str, scores: dict[str, object], **extra: object) -> dict[str, object]:
    return {"id": item_id, "status": status, "scores": scores, **extra}


def _ok(value: float | None, explanation: str | None = None) -> dict[str, object]:
    return {"value": value, "answer": None, "explanation": explanation}


FAILED = {"value": None, "answer": None, "explanation": "the item ended in error", "error": True}


def test_error_na_and_scored_are_counted_apart() -> None:
    tally = ScoreTally(["exact", "numeric"])
    tally.add_line(_line("a", "ok", {"exact": _ok(1.0), "numeric": _ok(None, "the item has no target")}))
    tally.add_line(_line("b", "ok", {"exact": _ok(0.0), "numeric": {**FAILED, "explanation": "ValueError: x"}}))
    tally.add_line(_line("c", "error", {"exact": FAILED, "numeric": FAILED}))
    tally.add_line(_line("d", "error", {}))  # an errored line without scores still counts for every scorer
    scores = tally.scores()
    exact, numeric = scores["exact"], scores["numeric"]
    assert (exact["n"], exact["n_error"], exact["n_na"]) == (2, 2, 0)
    assert (numeric["n"], numeric["n_error"], numeric["n_na"]) == (0, 3, 1)
    assert exact["mean"] == 0.5
    assert exact["strict"]["n"] == 4 and exact["strict"]["mean"] == 0.25
    assert exact["strict"] == {k: metrics([1.0, 0.0, 0.0, 0.0])[k] for k in ("mean", "stderr", "ci95", "n")}
    assert numeric["strict"]["mean"] == 0.0 and numeric["strict"]["n"] == 3  # the n/a item stays out


def test_without_errors_strict_equals_the_scored_view() -> None:
    tally = ScoreTally(["exact"])
    for index, value in enumerate([1.0, 0.0, 1.0]):
        tally.add_line(_line(f"i{index}", "ok", {"exact": _ok(value)}))
    exact = tally.scores()["exact"]
    assert exact["n_error"] == 0 and exact["n_na"] == 0
    assert exact["strict"] == {k: exact[k] for k in ("mean", "stderr", "ci95", "n")}


def test_the_issue_example_strict_view_ranks_the_variants_right() -> None:
    """One errored item lifts a variant's mean over scored items; strict shows it lower."""
    good = [_line(f"q{i}", "ok", {"exact": _ok(1.0 if i < 2 else 0.0)}) for i in range(10)]
    errored = [_line(f"q{i}", "ok", {"exact": _ok(1.0 if i < 2 else 0.0)}) for i in range(9)]
    errored.append(_line("q9", "error", {"exact": FAILED}))
    for lines, mean, strict in ((good, 0.2, 0.2), (errored, 2 / 9, 0.2)):
        tally = ScoreTally(["exact"])
        for line in lines:
            tally.add_line(line)
        exact = tally.scores()["exact"]
        assert exact["mean"] == pytest.approx(mean) and exact["strict"]["mean"] == pytest.approx(strict)
    errored[0] = _line("q0", "error", {"exact": FAILED})  # the candidate fails an item the base got right
    doc = compare_runs(good, errored)
    exact = doc["scorers"]["exact"]
    assert exact["n"] == 8 and exact["regressions"] == []
    assert exact["strict"]["n"] == 10
    assert exact["strict"]["diff"] == pytest.approx(-0.1)
    assert exact["strict"]["regressions"] == ["q0"] and exact["strict"]["improvements"] == []
    back = compare_runs(errored, good)["scorers"]["exact"]["strict"]
    assert back["improvements"] == ["q0"] and back["diff"] == pytest.approx(0.1)


def test_epochs_strict_counts_a_failed_epoch_as_zero() -> None:
    tally = ScoreTally(["exact"], reducer="mean")
    tally.add_line(_line("a", "ok", {"exact": _ok(1.0)}, epoch=1))
    tally.add_line(_line("a", "error", {"exact": FAILED}, epoch=2))
    tally.add_line(_line("b", "error", {"exact": FAILED}, epoch=1))
    tally.add_line(_line("b", "error", {"exact": FAILED}, epoch=2))
    exact = tally.scores()["exact"]
    assert (exact["n"], exact["n_error"], exact["n_na"]) == (1, 1, 0)
    assert exact["mean"] == 1.0
    assert exact["strict"]["n"] == 2 and exact["strict"]["mean"] == pytest.approx((0.5 + 0.0) / 2)


def test_groups_count_failures_too() -> None:
    tally = ScoreTally(["exact"], group_by="level")
    tally.add_line(_line("a", "ok", {"exact": _ok(1.0)}, metadata={"level": "easy"}))
    tally.add_line(_line("b", "error", {"exact": FAILED}, metadata={"level": "easy"}))
    tally.add_line(_line("c", "ok", {"exact": _ok(None, "the item has no target")}, metadata={"level": "hard"}))
    groups = tally.groups()
    assert groups is not None
    assert (groups["easy"]["exact"]["n_error"], groups["easy"]["exact"]["strict"]["mean"]) == (1, 0.5)
    assert (groups["hard"]["exact"]["n"], groups["hard"]["exact"]["n_na"]) == (0, 1)


def test_a_raising_or_nan_python_scorer_is_its_error_and_no_target_is_na() -> None:
    def boom(item: object, result: object) -> float:
        raise RuntimeError("broken scorer")

    def nan(item: object, result: object) -> float:
        return math.nan

    def inf(item: object, result: object) -> float:
        return math.inf

    plan = make_plan(["exact", boom, nan, inf])
    scored = trio.run(score_attempt, bind_scorers(plan.scorers), EvalItem(id="x"), EvalResult(final_response="42"))
    assert scored.scores["exact"] == {"value": None, "answer": None, "explanation": "the item has no target"}
    for name in ("boom", "nan", "inf"):
        assert scored.scores[name]["value"] is None and scored.scores[name]["error"] is True
    assert "RuntimeError: broken scorer" in scored.scores["boom"]["explanation"]
    assert "finite" in scored.scores["nan"]["explanation"]
    tally = ScoreTally(plan.names)
    tally.add_line({"id": "x", "status": "ok", "scores": scored.scores})
    scores = tally.scores()
    assert scores["exact"]["n_na"] == 1 and scores["exact"]["n_error"] == 0
    assert all(scores[name]["n_error"] == 1 for name in ("boom", "nan", "inf"))
    errored = trio.run(score_attempt, bind_scorers(plan.scorers), EvalItem(id="x"), EvalResult(status="error"))
    assert all(record["error"] is True for record in errored.scores.values())


def _results(path: Path, lines: list[dict[str, object]]) -> Path:
    base = {"session_id": None, "final_response": "x", "finish_reason": "completed", "subagents": [], "approvals": [],
            "attempts": 1, "duration_s": 0.5, "error": None, "metadata": {}, "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}
    path.write_bytes(b"".join(orjson.dumps({**base, **line}) + b"\n" for line in lines))
    return path


def test_compare_text_shows_the_strict_view_and_the_report_warns(tmp_path: Path) -> None:
    good = [_line(f"q{i}", "ok", {"exact": _ok(1.0 if i < 2 else 0.0)}) for i in range(4)]
    bad = [_line("q0", "error", {"exact": FAILED}), *good[1:]]
    base, candidate = _results(tmp_path / "base.jsonl", good), _results(tmp_path / "cand.jsonl", bad)
    done = run_cli(["compare", str(base), str(candidate)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "strict (an error scores 0): n 4" in done.stdout and "diff -0.250" in done.stdout
    assert "regressions (1): q0" in done.stdout
    page = tmp_path / "report.html"
    done = run_cli(["report", str(candidate), "--out", str(page)], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert 'id="errors-warning"' in html and "exact: 1 item excluded from the mean" in html
    assert "strict mean" in html and 'data-key="strict_mean" data-value="0.25"' in html


def test_compare_prints_a_verdict_per_scorer_first(tmp_path: Path) -> None:
    base = [_line(f"q{i}", "ok", {"exact": _ok(1.0 if i % 2 else 0.0)}) for i in range(8)]
    cand = [_line(f"q{i}", "ok", {"exact": _ok(1.0)}) for i in range(7)] + [_line("q7", "error", {"exact": FAILED})]
    done = run_cli(["compare", str(_results(tmp_path / "b.jsonl", base)), str(_results(tmp_path / "c.jsonl", cand))], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    doc = compare_runs(base, cand)["scorers"]["exact"]
    lo, hi = doc["ci95"]
    assert first == (f"exact: candidate +0.571 [{lo:+.3f}, {hi:+.3f}], p = {doc['p_value']:.3g}, 0 regressions, 4 improvements; "
                     "strict (an error scores 0) +0.375, 1 regressions, 4 improvements")
