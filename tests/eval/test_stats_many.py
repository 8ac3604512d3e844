"""compare BASE CAND [CAND ...], --all-pairs, --correction; the leaderboard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from dsh_orchestra.cli import main
from dsh_orchestra.eval._compare import CompareInputError, compare_runs
from dsh_orchestra.eval._many import compare_many

from eval_support import result, write_jsonl


def scored(item_id: str, values: dict[str, float]) -> dict[str, Any]:
    return result(item_id, "x", scores={k: {"value": v, "answer": None, "explanation": None} for k, v in values.items()},
                  usage={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2})


def make_run(rate: float, seed: int, n: int = 80) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    return [scored(f"i{i}", {"a": float(rng.random() < rate), "b": float(rng.random())}) for i in range(n)]


RUNS = [("base", make_run(0.4, 1)), ("c1", make_run(0.45, 2)), ("c2", make_run(0.9, 3)), ("c3", make_run(0.1, 4))]


@pytest.mark.parametrize(("ours", "theirs"), [("holm", "holm"), ("bh", "fdr_bh")])
def test_p_adjusted_over_candidates_and_scorers(ours: str, theirs: str) -> None:
    doc = compare_many(RUNS, correction=ours)
    assert [(c["base"], c["candidate"]) for c in doc["comparisons"]] == [("base", "c1"), ("base", "c2"), ("base", "c3")]
    raw = [c["scorers"][n]["p_value"] for c in doc["comparisons"] for n in ("a", "b")]
    adjusted = [c["scorers"][n]["p_adjusted"] for c in doc["comparisons"] for n in ("a", "b")]
    assert np.allclose(adjusted, multipletests(raw, method=theirs)[1], rtol=0, atol=1e-15)
    # each raw p is the two-run comparison's
    alone = compare_runs(RUNS[0][1], RUNS[2][1])
    assert doc["comparisons"][1]["scorers"]["a"]["p_value"] == alone["scorers"]["a"]["p_value"]


def test_all_pairs_and_leaderboard() -> None:
    doc = compare_many(RUNS, all_pairs=True, correction="holm")
    assert len(doc["comparisons"]) == 6 and doc["base"] is None
    board = doc["leaderboard"]["a"]
    assert [row["run"] for row in board][0] == "c2" and board[-1]["run"] == "c3"
    assert [row["rank"] for row in board] == [1, 2, 3, 4]
    top = board[0]
    assert "c3" in top["better_than"] and "c2" in next(r for r in board if r["run"] == "c3")["worse_than"]
    for row in board:
        assert row["ci95"][0] <= row["mean"] <= row["ci95"][1] and row["n"] == 80
    # a difference holds only when its adjusted p is below 0.05
    for comparison in doc["comparisons"]:
        s = comparison["scorers"]["a"]
        holds = comparison["candidate"] in next(r for r in board if r["run"] == comparison["base"])["better_than"] + \
            next(r for r in board if r["run"] == comparison["base"])["worse_than"]
        assert holds == (s["p_adjusted"] < 0.05)


def test_correction_none_keeps_raw_and_bad_input() -> None:
    doc = compare_many(RUNS[:3], correction="none")
    for c in doc["comparisons"]:
        for s in c["scorers"].values():
            assert s["p_adjusted"] == s["p_value"]
    with pytest.raises(CompareInputError, match="given twice"):
        compare_many([RUNS[0], RUNS[0]])
    with pytest.raises(CompareInputError, match="at least one candidate"):
        compare_many(RUNS[:1])
    with pytest.raises(CompareInputError, match="in no run"):
        compare_many(RUNS[:2], scorers=["zzz"])
    with pytest.raises(ValueError, match="holm, bh or none"):
        compare_many(RUNS[:2], correction="bonferroni")


def test_single_compare_has_adjusted_p_across_scorers_and_a_leaderboard() -> None:
    doc = compare_runs(RUNS[0][1], RUNS[2][1], labels=("b.jsonl", "c.jsonl"))
    raw = [doc["scorers"][n]["p_value"] for n in ("a", "b")]
    assert [doc["scorers"][n]["p_adjusted"] for n in ("a", "b")] == pytest.approx(multipletests(raw, method="holm")[1])
    assert [row["run"] for row in doc["leaderboard"]["a"]] == ["c.jsonl", "b.jsonl"]


def test_cli_many(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [write_jsonl(tmp_path / f"{label}.jsonl", lines) for label, lines in RUNS]
    code = main(["compare", *map(str, paths), "--json", "--correction", "bh"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["runs"] == list(map(str, paths)) and doc["correction"] == "bh" and len(doc["comparisons"]) == 3
    code = main(["compare", *map(str, paths), "--all-pairs"])
    out, _ = capsys.readouterr()
    assert code == 0 and out.count("== ") == 6 and "leaderboard" in out and "p adjusted" in out and "better than" in out
    page = tmp_path / "page.html"
    code = main(["compare", *map(str, paths), "--out", str(page)])
    capsys.readouterr()
    html = page.read_text()
    assert code == 0 and 'id="leaderboard"' in html and 'id="all-comparisons"' in html and "p adjusted" in html
    with pytest.raises(SystemExit) as exit_:
        main(["compare", str(paths[0]), str(paths[1]), "--correction", "bonferroni"])
    _, err = capsys.readouterr()
    assert exit_.value.code == 2 and "--correction" in err
